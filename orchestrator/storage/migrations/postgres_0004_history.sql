-- PostgreSQL schema, version 4: time travel (fork, rewind; docs/guide.md "Time travel").
-- Self-contained: it only adds columns, one table, one trigger function and its triggers.
--
-- value_history is append-only: every write of a thread's key-value store or of a thread-scoped env
-- value is logged by a trigger, stamped with the thread's last message seq at that moment, so the
-- value "as of message N" is the newest entry with at_seq <= N (value NULL: the key was deleted).

ALTER TABLE threads ADD COLUMN forked_from TEXT;
ALTER TABLE threads ADD COLUMN forked_at BIGINT;
ALTER TABLE messages ADD COLUMN superseded BOOLEAN NOT NULL DEFAULT FALSE;
ALTER TABLE events ADD COLUMN superseded BOOLEAN NOT NULL DEFAULT FALSE;

CREATE TABLE value_history (
    id          BIGSERIAL PRIMARY KEY,        -- write order
    thread_id   TEXT NOT NULL,
    kind        TEXT NOT NULL CHECK (kind IN ('value', 'env')),
    key         TEXT NOT NULL,
    at_seq      BIGINT NOT NULL,              -- the thread's last message seq when written
    value       TEXT,                         -- JSON text (kind value) or the env text; NULL: deleted
    type        TEXT,                         -- env type ('text' / 'secret'); NULL for values
    superseded  BOOLEAN NOT NULL DEFAULT FALSE
);
CREATE INDEX value_history_as_of ON value_history (thread_id, kind, key, at_seq);

INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
SELECT v.thread_id, 'value', v.key, (SELECT COALESCE(MAX(seq), 0) FROM messages m WHERE m.thread_id = v.thread_id),
       v.value::text, NULL
FROM thread_values v;
INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
SELECT e.owner_id, 'env', e.name, (SELECT COALESCE(MAX(seq), 0) FROM messages m WHERE m.thread_id = e.owner_id),
       e.value, e.type
FROM env_values e WHERE e.scope = 'thread';

CREATE FUNCTION orchestrator_log_value() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    -- each statement reads one record (OLD or NEW) of one table: the other is not assigned
    IF TG_TABLE_NAME = 'thread_values' THEN
        IF TG_OP = 'DELETE' THEN
            INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
            SELECT OLD.thread_id, 'value', OLD.key, COALESCE(MAX(seq), 0), NULL, NULL
            FROM messages WHERE thread_id = OLD.thread_id;
        ELSE
            INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
            SELECT NEW.thread_id, 'value', NEW.key, COALESCE(MAX(seq), 0), NEW.value::text, NULL
            FROM messages WHERE thread_id = NEW.thread_id;
        END IF;
    ELSIF TG_OP = 'DELETE' THEN
        INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
        SELECT OLD.owner_id, 'env', OLD.name, COALESCE(MAX(seq), 0), NULL, NULL
        FROM messages WHERE thread_id = OLD.owner_id;
    ELSE
        INSERT INTO value_history (thread_id, kind, key, at_seq, value, type)
        SELECT NEW.owner_id, 'env', NEW.name, COALESCE(MAX(seq), 0), NEW.value, NEW.type
        FROM messages WHERE thread_id = NEW.owner_id;
    END IF;
    RETURN NULL;
END
$$;

CREATE TRIGGER thread_values_logged AFTER INSERT OR UPDATE OR DELETE ON thread_values
    FOR EACH ROW EXECUTE FUNCTION orchestrator_log_value();
CREATE TRIGGER env_values_logged_write AFTER INSERT OR UPDATE ON env_values
    FOR EACH ROW WHEN (NEW.scope = 'thread') EXECUTE FUNCTION orchestrator_log_value();
CREATE TRIGGER env_values_logged_delete AFTER DELETE ON env_values
    FOR EACH ROW WHEN (OLD.scope = 'thread') EXECUTE FUNCTION orchestrator_log_value();
