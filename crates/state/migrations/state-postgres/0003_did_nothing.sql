-- A run status of its own for a task run that did nothing (its model answered in text and called
-- no tool): `did_nothing`.
ALTER TABLE runs DROP CONSTRAINT runs_status_check;
ALTER TABLE runs ADD CONSTRAINT runs_status_check
    CHECK (status IN ('queued', 'running', 'completed', 'failed', 'did_nothing', 'stopped', 'interrupted'));
