-- One run queue for a single copy and for replicas (crates/state/src/queue.rs): a run is queued
-- before it runs, claimed by the process that runs it, and resumed by a claim of its lapsed
-- lease. The same columns and tables as PostgreSQL's (state-postgres/0002_replicas.sql); in a
-- SQLite file there is one process, so its leases and heartbeats only ever name that one.

CREATE TABLE runs_new (
    id TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL
        CHECK (status IN ('queued', 'running', 'completed', 'failed', 'did_nothing', 'stopped', 'interrupted')),
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
    cost REAL,
    -- The request it was queued with (JSON); NULL for runs started before the queue.
    request TEXT,
    -- The process running it, and until when (Unix ms) its lease holds.
    holder TEXT,
    lease_until_ms INTEGER,
    -- How many times it was claimed; more than one means it resumes from its stored start.
    attempts INTEGER NOT NULL DEFAULT 0
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

-- What was sent to a run after it was asked for, in order: steering text, or a stop with its
-- reason. What the run did not take in goes to a follow-up run.
CREATE TABLE run_inputs (
    run_id TEXT NOT NULL,
    n INTEGER NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('steer', 'stop')),
    text TEXT NOT NULL,
    message_id TEXT,
    at_ms INTEGER NOT NULL,
    PRIMARY KEY (run_id, n)
);

-- Named leases (one: `stream`), as in PostgreSQL.
CREATE TABLE leases (
    name TEXT PRIMARY KEY NOT NULL,
    holder TEXT NOT NULL,
    expires_at_ms INTEGER NOT NULL,
    fencing INTEGER NOT NULL
);

-- Each process's last heartbeat, as in PostgreSQL.
CREATE TABLE replicas (
    id TEXT PRIMARY KEY NOT NULL,
    host TEXT NOT NULL,
    http TEXT,
    started_at_ms INTEGER NOT NULL,
    seen_at_ms INTEGER NOT NULL,
    holds_stream BOOLEAN NOT NULL,
    runs INTEGER NOT NULL,
    slots INTEGER NOT NULL
);
