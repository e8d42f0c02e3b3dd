-- SQLite schema, version 2: time travel (fork, rewind; docs/guide.md "Time travel").
-- Self-contained: it only adds columns, one table and triggers.
--
-- value_history is append-only: every write of a thread's key-value store or of a thread-scoped env
-- value is logged by a trigger, stamped with the thread's last message seq at that moment, so the
-- value "as of message N" is the newest entry with at_seq <= N (value NULL: the key was deleted).
-- The triggers keep set_value / set_env's code paths as they were: one more insert in the same
-- transaction, no extra statement from Python.

ALTER TABLE threads ADD COLUMN forked_from TEXT;
ALTER TABLE threads ADD COLUMN forked_at INTEGER;
ALTER TABLE messages ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;
ALTER TABLE events ADD COLUMN superseded INTEGER NOT NULL DEFAULT 0;

CREATE TABLE value_history (
    id          INTEGER PRIMARY KEY,        -- write order
    thread_id   TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('value', 'env')),
    key         TEXT NOT NULL,
    at_seq      INTEGER NOT NULL,           -- the thread's last message seq when written
    value       TEXT,                       -- JSON (kind value) or the env text; NULL: deleted
    type        TEXT,                       -- env type ('text' / 'secret'); NULL for values
    superseded  INTEGER NOT NULL DEFAULT 0  -- written after a point the thread was rewound to
);
CREATE INDEX value_history_as_of ON value_history (thread_id, kind, key, at_seq);

-- Values written before this migration: stamped with the thread's last seq (exact at the latest point).
INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
SELECT v.thread_id, 'value', v.key, (SELECT COALESCE(MAX(seq), 0) FROM messages m WHERE m.thread_id = v.thread_id),
       v.value, NULL
FROM thread_values v;
INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
SELECT e.owner_id, 'env', e.name, (SELECT COALESCE(MAX(seq), 0) FROM messages m WHERE m.thread_id = e.owner_id),
       e.value, e.type
FROM env_values e WHERE e.scope = 'thread';

CREATE TRIGGER thread_values_logged_insert AFTER INSERT ON thread_values BEGIN
    INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
    VALUES (NEW.thread_id, 'value', NEW.key,
            (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = NEW.thread_id), NEW.value, NULL);
END;
CREATE TRIGGER thread_values_logged_update AFTER UPDATE ON thread_values BEGIN
    INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
    VALUES (NEW.thread_id, 'value', NEW.key,
            (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = NEW.thread_id), NEW.value, NULL);
END;
CREATE TRIGGER thread_values_logged_delete AFTER DELETE ON thread_values BEGIN
    INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
    VALUES (OLD.thread_id, 'value', OLD.key,
            (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = OLD.thread_id), NULL, NULL);
END;
CREATE TRIGGER env_values_logged_insert AFTER INSERT ON env_values WHEN NEW.scope = 'thread' BEGIN
    INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
    VALUES (NEW.owner_id, 'env', NEW.name,
            (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = NEW.owner_id), NEW.value, NEW.type);
END;
CREATE TRIGGER env_values_logged_update AFTER UPDATE ON env_values WHEN NEW.scope = 'thread' BEGIN
    INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
    VALUES (NEW.owner_id, 'env', NEW.name,
            (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = NEW.owner_id), NEW.value, NEW.type);
END;
CREATE TRIGGER env_values_logged_delete AFTER DELETE ON env_values WHEN OLD.scope = 'thread' BEGIN
    INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
    VALUES (OLD.owner_id, 'env', OLD.name,
            (SELECT COALESCE(MAX(seq), 0) FROM messages WHERE thread_id = OLD.owner_id), NULL, NULL);
END;
