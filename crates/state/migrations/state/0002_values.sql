-- Small named values the router keeps across restarts, such as the cursor of the last mention
-- reconciled through REST.
CREATE TABLE named_values (
    name TEXT PRIMARY KEY NOT NULL,
    value TEXT NOT NULL,
    updated_at_ms INTEGER NOT NULL
);
