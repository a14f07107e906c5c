-- One row per firing of a scheduled job, per agent: where it is or how it ended, the run it was
-- queued as and a word on why. The same table as SQLite's (state/0008_schedule_firings.sql),
-- which says what each column is for; the outcome has no CHECK there either.
CREATE TABLE schedule_firings (
    agent TEXT NOT NULL,
    job TEXT NOT NULL,
    fire_at_ms BIGINT NOT NULL,
    outcome TEXT NOT NULL,
    run_id TEXT,
    detail TEXT NOT NULL DEFAULT '',
    updated_at_ms BIGINT NOT NULL,
    PRIMARY KEY (agent, job, fire_at_ms)
);
-- The firing a run was queued for, asked when the run ends.
CREATE INDEX schedule_firings_by_run ON schedule_firings (agent, run_id) WHERE run_id IS NOT NULL;
