-- PostgreSQL schema, version 2: the execution queue that `orchestrator worker`
-- processes take work from (orchestrator/queue.py). One row per request to run
-- a thread: "run" (a dual_ai execution) or "send" (a person's message).

CREATE TABLE execution_requests (
    id           BIGSERIAL PRIMARY KEY,
    thread_id    TEXT NOT NULL REFERENCES threads (id) ON DELETE CASCADE,
    kind         TEXT NOT NULL CHECK (kind IN ('run', 'send')),
    text         TEXT,
    status       TEXT NOT NULL DEFAULT 'queued'
                 CHECK (status IN ('queued', 'picked', 'done', 'failed', 'cancelled')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    available_at DOUBLE PRECISION NOT NULL,
    picked_by    TEXT,
    picked_at    DOUBLE PRECISION,
    flow_id      TEXT,
    error        TEXT,
    created_at   DOUBLE PRECISION NOT NULL,
    finished_at  DOUBLE PRECISION
);
-- what the pick query scans: queued rows by due time
CREATE INDEX execution_requests_ready ON execution_requests (available_at, id) WHERE status = 'queued';
-- what reclaim scans: rows held by a worker
CREATE INDEX execution_requests_picked ON execution_requests (picked_at) WHERE status = 'picked';
CREATE INDEX execution_requests_by_thread ON execution_requests (thread_id, id);
