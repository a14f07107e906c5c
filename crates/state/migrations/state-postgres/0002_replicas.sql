-- Replicas of one agent sharing this database (`replicas.enabled`): a run queue with per-run
-- leases, the inputs sent to a run wherever it runs, the lease on the event stream, and each
-- replica's heartbeat. Only PostgreSQL has these: a SQLite file is one process's. What each
-- guarantees is written at the top of src/state/lease.rs and src/state/queue.rs.

ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'stopped', 'interrupted'));
-- The request a queued run was asked with (JSON text: the session, the trigger, the task or the
-- message); NULL for runs started by a single copy, which rebuilds it from the tracker.
ALTER TABLE runs ADD COLUMN request TEXT;
-- The replica running it, and until when (the database's clock, Unix ms) its lease holds.
ALTER TABLE runs ADD COLUMN holder TEXT;
ALTER TABLE runs ADD COLUMN lease_until_ms BIGINT;
-- How many times a replica took it; more than one means it resumes from its stored start.
ALTER TABLE runs ADD COLUMN attempts BIGINT NOT NULL DEFAULT 0;
CREATE INDEX runs_claimable ON runs (agent, row_order) WHERE status IN ('queued', 'running');

-- What was sent to a run after it was asked for, in order: steering text, or a stop with its
-- reason. The replica holding the run hands them to it; what it did not take in goes to a
-- follow-up run.
CREATE TABLE run_inputs (
    agent TEXT NOT NULL,
    run_id TEXT NOT NULL,
    n BIGINT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('steer', 'stop')),
    text TEXT NOT NULL,
    message_id TEXT,
    at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent, run_id, n)
);

-- Named leases (one: `stream`, the event stream), held by one replica until `expires_at_ms`
-- (the database's clock). `fencing` grows with every new holder.
CREATE TABLE leases (
    agent TEXT NOT NULL,
    name TEXT NOT NULL,
    holder TEXT NOT NULL,
    expires_at_ms BIGINT NOT NULL,
    fencing BIGINT NOT NULL,
    PRIMARY KEY (agent, name)
);

-- Each replica's last heartbeat, for /readyz.
CREATE TABLE replicas (
    agent TEXT NOT NULL,
    id TEXT NOT NULL,
    host TEXT NOT NULL,
    http TEXT,
    started_at_ms BIGINT NOT NULL,
    seen_at_ms BIGINT NOT NULL,
    holds_stream BOOLEAN NOT NULL,
    runs BIGINT NOT NULL,
    slots BIGINT NOT NULL,
    PRIMARY KEY (agent, id)
);
