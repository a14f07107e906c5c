-- The reference board's schema. Ids are UUID strings; `row` columns give a stable insertion
-- order for lists and cursors. JSON arrays (labels, mentions) are stored as JSON text and read
-- with SQLite's json_each.

CREATE TABLE projects (
    id TEXT PRIMARY KEY,
    slug TEXT NOT NULL UNIQUE,
    key TEXT NOT NULL UNIQUE,
    name TEXT NOT NULL,
    chat_id TEXT NOT NULL UNIQUE,
    active INTEGER NOT NULL DEFAULT 1,
    -- The number the next task of this project gets in its key (TE-1, TE-2, ...).
    next_task_number INTEGER NOT NULL DEFAULT 1
);

CREATE TABLE members (
    slug TEXT PRIMARY KEY,
    name TEXT NOT NULL,
    kind TEXT NOT NULL CHECK (kind IN ('human', 'agent')),
    status TEXT NOT NULL DEFAULT '',
    token TEXT NOT NULL UNIQUE
);

CREATE TABLE tasks (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    key TEXT NOT NULL UNIQUE,
    project_id TEXT NOT NULL REFERENCES projects (id),
    title TEXT NOT NULL,
    description TEXT,
    type TEXT NOT NULL,
    status TEXT NOT NULL,
    priority TEXT NOT NULL,
    assignee_slug TEXT REFERENCES members (slug),
    labels TEXT NOT NULL DEFAULT '[]',
    created_by TEXT NOT NULL REFERENCES members (slug),
    created_at TEXT NOT NULL,
    updated_at TEXT NOT NULL
);
CREATE INDEX tasks_project ON tasks (project_id, row);
CREATE INDEX tasks_assignee ON tasks (assignee_slug, row);

CREATE TABLE task_watchers (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    member_slug TEXT NOT NULL REFERENCES members (slug),
    UNIQUE (task_id, member_slug)
);

CREATE TABLE steps (
    id TEXT PRIMARY KEY,
    task_id TEXT NOT NULL REFERENCES tasks (id),
    title TEXT NOT NULL,
    done INTEGER NOT NULL DEFAULT 0,
    position INTEGER NOT NULL
);
CREATE INDEX steps_task ON steps (task_id, position);

CREATE TABLE messages (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    author_slug TEXT NOT NULL REFERENCES members (slug),
    content TEXT NOT NULL,
    chat_id TEXT,
    task_id TEXT REFERENCES tasks (id),
    parent_id TEXT REFERENCES messages (id),
    mentions TEXT NOT NULL DEFAULT '[]',
    created_at TEXT NOT NULL
);
CREATE INDEX messages_chat ON messages (chat_id, row);
CREATE INDEX messages_task ON messages (task_id, row);
CREATE INDEX messages_parent ON messages (parent_id, row);

CREATE TABLE attachments (
    row INTEGER PRIMARY KEY AUTOINCREMENT,
    id TEXT NOT NULL UNIQUE,
    message_id TEXT NOT NULL REFERENCES messages (id),
    filename TEXT NOT NULL,
    mime_type TEXT NOT NULL,
    size INTEGER NOT NULL,
    content BLOB NOT NULL
);
CREATE INDEX attachments_message ON attachments (message_id);

-- The durable per-member event log: `seq` counts up by one per member, assigned in the
-- transaction of the change that caused the event.
CREATE TABLE events (
    member_slug TEXT NOT NULL REFERENCES members (slug),
    seq INTEGER NOT NULL,
    id TEXT NOT NULL UNIQUE,
    event TEXT NOT NULL,
    data TEXT NOT NULL,
    ts TEXT NOT NULL,
    PRIMARY KEY (member_slug, seq)
);

-- The first answer to each Idempotency-Key, per member. `status` is NULL while the first
-- request is still being handled.
CREATE TABLE idempotency (
    member_slug TEXT NOT NULL,
    key TEXT NOT NULL,
    method TEXT NOT NULL,
    path TEXT NOT NULL,
    status INTEGER,
    body TEXT,
    created_at INTEGER NOT NULL,
    PRIMARY KEY (member_slug, key)
);
