-- What a running run waits for from a person (JSON: what is asked, where, since when), while it
-- waits: an approval in `ask` mode, an MCP server's elicitation, a question of the model's.
-- NULL when it waits for nobody. The same column as PostgreSQL's (state-postgres/0004_waiting.sql).
ALTER TABLE runs ADD COLUMN waiting TEXT;
