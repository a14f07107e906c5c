-- A run status of its own for a task run that did nothing (its model answered in text and called
-- no tool): `did_nothing`. SQLite cannot change a CHECK constraint, so the table is built again
-- with the same columns, rows and row ids (retention orders ties by row id), and its indexes.
CREATE TABLE runs_new (
    id TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('running', 'completed', 'failed', 'did_nothing', 'stopped', 'interrupted')),
    turns INTEGER NOT NULL DEFAULT 0,
    tool_calls INTEGER NOT NULL DEFAULT 0,
    prompt_tokens INTEGER NOT NULL DEFAULT 0,
    completion_tokens INTEGER NOT NULL DEFAULT 0,
    model_duration_ms INTEGER NOT NULL DEFAULT 0,
    tool_duration_ms INTEGER NOT NULL DEFAULT 0,
    outcome TEXT,
    error TEXT,
    started_at_ms INTEGER NOT NULL,
    finished_at_ms INTEGER,
    -- The full run record and transcript, opaque JSON owned by the model loop.
    record TEXT,
    cost REAL
);
INSERT INTO runs_new (rowid, id, session_key, trigger, status, turns, tool_calls, prompt_tokens, completion_tokens,
                      model_duration_ms, tool_duration_ms, outcome, error, started_at_ms, finished_at_ms, record, cost)
    SELECT rowid, id, session_key, trigger, status, turns, tool_calls, prompt_tokens, completion_tokens,
           model_duration_ms, tool_duration_ms, outcome, error, started_at_ms, finished_at_ms, record, cost
    FROM runs;
DROP TABLE runs;
ALTER TABLE runs_new RENAME TO runs;
CREATE INDEX runs_by_session ON runs (session_key, status);
CREATE INDEX runs_by_status ON runs (status);
CREATE INDEX runs_by_start ON runs (started_at_ms);
