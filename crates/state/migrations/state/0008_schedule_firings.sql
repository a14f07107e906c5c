-- One row per firing of a scheduled job (a named schedule from agent.json, e.g. `standup-daily`):
-- its scheduled time, where it is or how it ended (`queued`, `posted`, `idle`, `skipped`,
-- `failed`, `stopped`), the run it was queued as and a word on why. Shown to people, and read by
-- later firings of the job. Exactly-once is the claim's (`firing`, `{job}@{fire_at_ms}`), not
-- this table's; how far the scheduler has looked is the named value `schedule.through.{job}`.
-- The outcome has no CHECK: a word this picogent does not know reads back as a corrupt row. The
-- same table as PostgreSQL's (state-postgres/0005_schedule_firings.sql).
CREATE TABLE schedule_firings (
    job TEXT NOT NULL,
    fire_at_ms INTEGER NOT NULL,
    outcome TEXT NOT NULL,
    run_id TEXT,
    detail TEXT NOT NULL DEFAULT '',
    updated_at_ms INTEGER NOT NULL,
    PRIMARY KEY (job, fire_at_ms)
);
-- The firing a run was queued for, asked when the run ends.
CREATE INDEX schedule_firings_by_run ON schedule_firings (run_id);
