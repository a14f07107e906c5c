-- What runs cost in money, when `llm.price` is set: per UTC day (for `limits.max_cost_per_day`)
-- and per run.
ALTER TABLE daily_spend ADD COLUMN cost REAL NOT NULL DEFAULT 0;
ALTER TABLE runs ADD COLUMN cost REAL;
