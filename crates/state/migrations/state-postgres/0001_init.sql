-- The agent's durable state in PostgreSQL: the tables of migrations/state/ (SQLite), each row
-- keyed by the agent it belongs to (`agent`, the agent's slug), so one database holds several
-- agents and replicas of one agent share theirs. Times are Unix milliseconds (UTC); ids are text;
-- counts are BIGINT, as SQLite's INTEGER.

-- Every event the router took in, keyed by the tracker's event id.
CREATE TABLE processed_events (
    agent TEXT NOT NULL,
    id TEXT NOT NULL,
    seq BIGINT NOT NULL,
    name TEXT NOT NULL,
    processed_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent, id)
);
CREATE INDEX processed_events_by_time ON processed_events (agent, processed_at_ms);

-- The highest seq processed, per agent, kept apart from processed_events so old rows can be
-- pruned without losing the resume point. No row: 0.
CREATE TABLE stream_position (
    agent TEXT PRIMARY KEY NOT NULL,
    last_seq BIGINT NOT NULL
);

-- Things handled once, whichever path saw them first (event, replay, reconciliation).
CREATE TABLE claims (
    agent TEXT NOT NULL,
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    claimed_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent, kind, key)
);

-- One conversation per task or chat thread; the messages are opaque JSON text owned by the
-- model loop (text, not jsonb: stored and given back byte for byte).
CREATE TABLE sessions (
    agent TEXT NOT NULL,
    key TEXT NOT NULL,
    messages TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent, key)
);

CREATE TABLE runs (
    agent TEXT NOT NULL,
    id TEXT NOT NULL,
    -- The order rows were inserted in, to break ties in started_at_ms (SQLite's rowid).
    row_order BIGINT GENERATED ALWAYS AS IDENTITY,
    session_key TEXT NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'stopped', 'interrupted')),
    turns BIGINT NOT NULL DEFAULT 0,
    tool_calls BIGINT NOT NULL DEFAULT 0,
    prompt_tokens BIGINT NOT NULL DEFAULT 0,
    completion_tokens BIGINT NOT NULL DEFAULT 0,
    model_duration_ms BIGINT NOT NULL DEFAULT 0,
    tool_duration_ms BIGINT NOT NULL DEFAULT 0,
    outcome TEXT,
    error TEXT,
    started_at_ms BIGINT NOT NULL,
    finished_at_ms BIGINT,
    -- The full run record and transcript, opaque JSON text owned by the model loop.
    record TEXT,
    cost DOUBLE PRECISION,
    PRIMARY KEY (agent, id)
);
CREATE INDEX runs_by_session ON runs (agent, session_key, status);
CREATE INDEX runs_by_status ON runs (agent, status);
CREATE INDEX runs_by_start ON runs (agent, started_at_ms);

-- Tokens and money per UTC day (`YYYY-MM-DD`), for the daily budget.
CREATE TABLE daily_spend (
    agent TEXT NOT NULL,
    day TEXT NOT NULL,
    tokens BIGINT NOT NULL,
    cost DOUBLE PRECISION NOT NULL DEFAULT 0,
    PRIMARY KEY (agent, day)
);

-- One row per reply the agent posted in a thread, for the loop guard.
CREATE TABLE replies (
    agent TEXT NOT NULL,
    thread_key TEXT NOT NULL,
    at_ms BIGINT NOT NULL
);
CREATE INDEX replies_by_thread ON replies (agent, thread_key, at_ms);
CREATE INDEX replies_by_time ON replies (agent, at_ms);

-- Small named values kept across restarts, such as the cursor of reconciled mentions.
CREATE TABLE named_values (
    agent TEXT NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent, name)
);
