-- Which message a message answers, as its author named it (`reply_to` in docs/tracker-api.md).
-- Additive: existing messages name none.
ALTER TABLE messages ADD COLUMN reply_to TEXT REFERENCES messages (id);
