-- What a running run waits for from a person (JSON), while it waits; NULL otherwise. The same
-- column as SQLite's (state/0007_waiting.sql).
ALTER TABLE runs ADD COLUMN waiting TEXT;
