-- SQLite schema, version 1. JSON columns hold the pydantic models' JSON form as text.

CREATE TABLE threads (
    id          TEXT PRIMARY KEY,
    agent_id    TEXT NOT NULL,
    user_id     TEXT,
    arguments   TEXT NOT NULL,              -- JSON object
    parent_id   TEXT,
    depth       INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL,
    execution   TEXT,                       -- JSON ExecutionSnapshot, or NULL
    usage       TEXT NOT NULL,              -- JSON Usage
    created_at  REAL NOT NULL,
    updated_at  REAL NOT NULL
);
CREATE INDEX threads_by_user ON threads (user_id, created_at);
CREATE INDEX threads_by_status ON threads (status, created_at);

CREATE TABLE messages (
    thread_id       TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq             INTEGER NOT NULL,
    id              TEXT NOT NULL,
    side            TEXT,
    role            TEXT NOT NULL,
    content         TEXT,
    tool_calls      TEXT,                   -- JSON list, or NULL
    tool_call_id    TEXT,
    name            TEXT,
    tool_status     TEXT,
    attachments     TEXT NOT NULL,          -- JSON list of AttachmentRef
    provider_blocks TEXT,                   -- JSON list, or NULL
    silent          INTEGER NOT NULL DEFAULT 0,
    depth           INTEGER NOT NULL DEFAULT 0,
    flow_id         TEXT,
    metadata        TEXT NOT NULL,          -- JSON object
    created_at      REAL NOT NULL,
    updated_at      REAL NOT NULL,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, id)
);
-- The common page: visible messages of a thread, newest first.
CREATE INDEX messages_visible ON messages (thread_id, silent, seq);

CREATE TABLE thread_values (
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    value       TEXT NOT NULL,              -- JSON
    PRIMARY KEY (thread_id, key)
);

CREATE TABLE env_values (
    scope       TEXT NOT NULL CHECK (scope IN ('thread', 'user')),
    owner_id    TEXT NOT NULL,
    name        TEXT NOT NULL,
    value       TEXT NOT NULL,
    type        TEXT NOT NULL CHECK (type IN ('text', 'secret')),
    PRIMARY KEY (scope, owner_id, name)
);

CREATE TABLE files (
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    id          TEXT NOT NULL,
    name        TEXT NOT NULL,
    mime_type   TEXT NOT NULL,
    size        INTEGER NOT NULL,
    width       INTEGER,
    height      INTEGER,
    data        BLOB NOT NULL,
    PRIMARY KEY (thread_id, id)
);

CREATE TABLE events (
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq         INTEGER NOT NULL,
    type        TEXT NOT NULL,
    data        TEXT NOT NULL,              -- JSON
    at          REAL NOT NULL,
    PRIMARY KEY (thread_id, seq)
);

-- One row per thread ever leased; kept on release so the token never goes back.
CREATE TABLE leases (
    thread_id   TEXT PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    owner       TEXT,                       -- NULL once released
    token       INTEGER NOT NULL,
    expires_at  REAL NOT NULL
);
