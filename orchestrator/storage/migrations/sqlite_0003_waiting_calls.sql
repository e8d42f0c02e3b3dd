-- SQLite schema, version 2: tool calls waiting for the outside (approvals, deferred results,
-- `state.ask` answers); orchestrator/core/waiting.py. One row per pause of a call.

CREATE TABLE waiting_calls (
    thread_id    TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    call_id      TEXT NOT NULL,
    position     INTEGER NOT NULL,
    kind         TEXT NOT NULL CHECK (kind IN ('approval', 'result', 'answer')),
    tool         TEXT NOT NULL,
    arguments    TEXT NOT NULL,             -- JSON object
    side         TEXT NOT NULL,
    payload      TEXT NOT NULL,             -- JSON (the question of `state.ask`, else null)
    requested_at REAL NOT NULL,
    expires_at   REAL,
    decision     TEXT,                      -- JSON Decision, NULL while open
    decided_at   REAL,                      -- NULL while open: decisions are `... WHERE decided_at IS NULL`
    PRIMARY KEY (thread_id, call_id, position)
);
-- The open calls whose expiry passed, across threads (the runtime's sweep).
CREATE INDEX waiting_calls_open ON waiting_calls (expires_at) WHERE decided_at IS NULL;
