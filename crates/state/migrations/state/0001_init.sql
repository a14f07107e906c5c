-- The agent's durable state. Times are Unix milliseconds (UTC); ids are text.

-- Every event the router took in, keyed by the tracker's event id: a duplicate delivered by a
-- reconnect or a replay hits the primary key and is dropped.
CREATE TABLE processed_events (
    id TEXT PRIMARY KEY NOT NULL,
    seq INTEGER NOT NULL,
    name TEXT NOT NULL,
    processed_at_ms INTEGER NOT NULL
);

-- The highest seq processed, kept apart from processed_events so old rows can be pruned without
-- losing the resume point. Exactly one row.
CREATE TABLE stream_position (
    singleton INTEGER PRIMARY KEY NOT NULL CHECK (singleton = 1),
    last_seq INTEGER NOT NULL
);
INSERT INTO stream_position (singleton, last_seq) VALUES (1, 0);

-- Things handled once, whichever path saw them first (event, replay, reconciliation):
-- ("task_assignment", "TE-3"), ("message_answered", "<id>"), ("failure_notice", "<run id>").
CREATE TABLE claims (
    kind TEXT NOT NULL,
    key TEXT NOT NULL,
    claimed_at_ms INTEGER NOT NULL,
    PRIMARY KEY (kind, key)
);

-- One conversation per task (`task:<id>`) or chat thread (`thread:<root message id>`); the
-- messages are opaque JSON owned by the model loop.
CREATE TABLE sessions (
    key TEXT PRIMARY KEY NOT NULL,
    messages TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
);

CREATE TABLE runs (
    id TEXT PRIMARY KEY NOT NULL,
    session_key TEXT NOT NULL,
    trigger TEXT NOT NULL,
    status TEXT NOT NULL CHECK (status IN ('running', 'completed', 'failed', 'stopped', 'interrupted')),
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
    record TEXT
);
CREATE INDEX runs_by_session ON runs (session_key, status);
CREATE INDEX runs_by_status ON runs (status);
CREATE INDEX runs_by_start ON runs (started_at_ms);

-- Prompt + completion tokens per UTC day (`YYYY-MM-DD`), for the daily budget.
CREATE TABLE daily_spend (
    day TEXT PRIMARY KEY NOT NULL,
    tokens INTEGER NOT NULL
);

-- One row per reply the agent posted in a thread, for the loop guard.
CREATE TABLE replies (
    thread_key TEXT NOT NULL,
    at_ms INTEGER NOT NULL
);
CREATE INDEX replies_by_thread ON replies (thread_key, at_ms);
