-- PostgreSQL schema, version 1. Tables live in the connection's search_path schema.
-- JSON columns use `json` (not jsonb) so stored text round-trips verbatim
-- (key order of provider blocks included).

CREATE TABLE threads (
    id          TEXT PRIMARY KEY,
    agent_id    TEXT NOT NULL,
    user_id     TEXT,
    arguments   JSON NOT NULL,
    parent_id   TEXT,
    depth       INTEGER NOT NULL DEFAULT 0,
    status      TEXT NOT NULL,
    execution   JSON,
    usage       JSON NOT NULL,
    created_at  DOUBLE PRECISION NOT NULL,
    updated_at  DOUBLE PRECISION NOT NULL
);
CREATE INDEX threads_by_user ON threads (user_id, created_at);
CREATE INDEX threads_by_status ON threads (status, created_at);

CREATE TABLE messages (
    thread_id       TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq             BIGINT NOT NULL,
    id              TEXT NOT NULL,
    side            TEXT,
    role            TEXT NOT NULL,
    content         TEXT,
    tool_calls      JSON,
    tool_call_id    TEXT,
    name            TEXT,
    tool_status     TEXT,
    attachments     JSON NOT NULL,
    provider_blocks JSON,
    silent          BOOLEAN NOT NULL DEFAULT FALSE,
    depth           INTEGER NOT NULL DEFAULT 0,
    flow_id         TEXT,
    metadata        JSON NOT NULL,
    created_at      DOUBLE PRECISION NOT NULL,
    updated_at      DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread_id, seq),
    UNIQUE (thread_id, id)
);
CREATE INDEX messages_visible ON messages (thread_id, silent, seq);

CREATE TABLE thread_values (
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    key         TEXT NOT NULL,
    value       JSON NOT NULL,
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
    size        BIGINT NOT NULL,
    width       INTEGER,
    height      INTEGER,
    data        BYTEA NOT NULL,
    PRIMARY KEY (thread_id, id)
);

CREATE TABLE events (
    thread_id   TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    seq         BIGINT NOT NULL,
    type        TEXT NOT NULL,
    data        JSON NOT NULL,
    at          DOUBLE PRECISION NOT NULL,
    PRIMARY KEY (thread_id, seq)
);

CREATE TABLE leases (
    thread_id   TEXT PRIMARY KEY REFERENCES threads (id) ON DELETE CASCADE,
    owner       TEXT,
    token       BIGINT NOT NULL,
    expires_at  DOUBLE PRECISION NOT NULL
);
