-- +goose Up
-- Migration 00007's four rules, checked by a trigger instead of CHECK
-- constraints, with the same SQLSTATE (23514, check_violation), the same
-- constraint names in the error and the same message.
--
-- Why: PostgreSQL checks every CHECK constraint of a table on every new row
-- version, and rebuilds each constraint's expression from its stored text
-- at every statement that writes the table (execMain.c, ExecRelCheck:
-- stringToNode and expression planning into the statement's own executor
-- state). The relay's claim and mark are UPDATEs of columns no rule reads,
-- so they paid for all four: 19% of the relay's database CPU at 1,000
-- events/s (perf on its backend: ExecConstraints), about 50 us per UPDATE
-- statement (pgbench, one-row UPDATE, synchronous_commit off: 0.17 ms with
-- the checks, 0.12 ms without). Row triggers that fire only on INSERT and
-- on an UPDATE that names a checked column cost the relay nothing, and
-- costs a one-row INSERT less than the checks did (0.09 against 0.12 ms;
-- 10,000-row INSERT ... SELECT: 104-108 ms against 93-108 ms). Measured
-- end to end (outbox-bench --scenario latency --mode notify-proc --rate
-- 1000, writers and relay together, two runs of each interleaved): 0.504
-- and 0.515 ms of database CPU per event with the constraints, 0.464 and
-- 0.455 with the triggers; WAL per event unchanged (902-903 bytes against
-- 903-911).
--
-- The rules (see 00007 for where each comes from):
--   outbox_aggregate_id_check: not empty, at most 1024 bytes;
--   outbox_event_type_check: not empty;
--   outbox_headers_check: SQL NULL, or a JSON object of strings with no
--     empty or reserved name (event_id, event_type, aggregate_id);
--   outbox_topic_check: SQL NULL, or a legal Kafka topic name.
-- A rule that evaluates to NULL passes, as a CHECK constraint's does.
--
-- Rows already in the table stay as they are: the triggers see only new
-- rows and updates of the checked columns, so 00007's exemption of old rows
-- (seq <= N) is no longer needed. Triggers do not fire while
-- session_replication_role is 'replica' (logical replication's apply
-- workers, pg_restore --disable-triggers); the relay parks such a row as a
-- dead letter by itself if it cannot publish it.
--
-- The function runs with search_path pg_catalog, pg_temp: a PL/pgSQL body
-- resolves the functions and operators it calls by the caller's
-- search_path, and a writer could otherwise shadow them (a CHECK constraint
-- stores resolved OIDs and cannot be fooled that way).
--
-- The table is locked first, as 00007 did: CREATE TRIGGER takes a SHARE ROW
-- EXCLUSIVE lock and DROP CONSTRAINT then needs ACCESS EXCLUSIVE, and a
-- producer transaction that had read the table and then inserted into it in
-- between deadlocked with the migration.
--
-- A BEFORE INSERT trigger of your own whose name sorts after
-- outbox_row_checks runs after the checks and can change a checked column
-- unchecked (a CHECK constraint runs after every BEFORE trigger). COPY into
-- a table with row triggers inserts row by row instead of in batches: a
-- 200,000-row COPY took 1.85 s against 1.5 s with the constraints.
LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;

-- +goose StatementBegin
CREATE FUNCTION outbox_check_row() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS $fn$
BEGIN
    IF NOT (NEW."aggregate_id"::text <> '' AND octet_length(NEW."aggregate_id"::text) <= 1024) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'outbox_aggregate_id_check',
            TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
            MESSAGE = format('new row for relation "%s" violates check constraint "%s"', TG_TABLE_NAME, 'outbox_aggregate_id_check'),
            DETAIL = 'aggregate_id must be 1 to 1024 bytes.';
    END IF;
    IF NOT (NEW."event_type"::text <> '') THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'outbox_event_type_check',
            TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
            MESSAGE = format('new row for relation "%s" violates check constraint "%s"', TG_TABLE_NAME, 'outbox_event_type_check'),
            DETAIL = 'event_type must not be empty.';
    END IF;
    IF NOT (NEW.headers IS NULL OR (jsonb_typeof(NEW.headers) = 'object' AND NOT jsonb_path_exists(NEW.headers, 'strict $.* ? (@.type() != "string")') AND NOT (NEW.headers ?| ARRAY['', 'event_id', 'event_type', 'aggregate_id']))) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'outbox_headers_check',
            TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
            MESSAGE = format('new row for relation "%s" violates check constraint "%s"', TG_TABLE_NAME, 'outbox_headers_check'),
            DETAIL = 'headers must be NULL or a JSON object of strings, with no empty name and none of event_id, event_type, aggregate_id.';
    END IF;
    IF NOT (NEW.topic IS NULL OR (NEW.topic ~ '^[a-zA-Z0-9._-]+$' AND octet_length(NEW.topic) <= 249 AND NEW.topic NOT IN ('.', '..'))) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = 'outbox_topic_check',
            TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
            MESSAGE = format('new row for relation "%s" violates check constraint "%s"', TG_TABLE_NAME, 'outbox_topic_check'),
            DETAIL = 'topic must be NULL or a Kafka topic name: 1 to 249 characters of a-z A-Z 0-9 . _ -, not "." or "..".';
    END IF;
    RETURN NEW;
END
$fn$;
-- +goose StatementEnd

-- Two triggers, not one BEFORE INSERT OR UPDATE OF ...: a table with any
-- BEFORE UPDATE row trigger has every updated row locked first, whatever
-- its column list (trigger.c, ExecBRUpdateTriggers calls GetTupleForTrigger
-- before it looks at the columns): a Heap/LOCK WAL record per row the claim
-- or the mark updates, 108 more WAL bytes per event at 1,000 events/s
-- (pg_waldump --stats). An AFTER UPDATE OF trigger is queued only for an
-- UPDATE that names a checked column, and locks nothing; raising in it
-- fails the UPDATE all the same.
CREATE TRIGGER outbox_row_checks BEFORE INSERT ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_check_row();
CREATE TRIGGER outbox_row_checks_on_update AFTER UPDATE OF "aggregate_id", "event_type", headers, topic ON outbox
    FOR EACH ROW EXECUTE FUNCTION outbox_check_row();

ALTER TABLE outbox
    DROP CONSTRAINT IF EXISTS outbox_topic_check,
    DROP CONSTRAINT IF EXISTS outbox_headers_check,
    DROP CONSTRAINT IF EXISTS outbox_event_type_check,
    DROP CONSTRAINT IF EXISTS outbox_aggregate_id_check;

-- +goose Down
LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
DROP TRIGGER IF EXISTS outbox_row_checks ON outbox;
DROP TRIGGER IF EXISTS outbox_row_checks_on_update ON outbox;
DROP FUNCTION IF EXISTS outbox_check_row();
-- 00007's constraints again, exempting the rows written until now.
-- +goose StatementBegin
DO $migration$
DECLARE
    rules text[] := ARRAY[
        ['outbox_aggregate_id_check', $$aggregate_id <> '' AND octet_length(aggregate_id) <= 1024$$],
        ['outbox_event_type_check',   $$event_type <> ''$$],
        ['outbox_headers_check',      $$headers IS NULL OR (jsonb_typeof(headers) = 'object' AND NOT jsonb_path_exists(headers, 'strict $.* ? (@.type() != "string")') AND NOT (headers ?| ARRAY['', 'event_id', 'event_type', 'aggregate_id']))$$],
        ['outbox_topic_check',        $$topic IS NULL OR (topic ~ '^[a-zA-Z0-9._-]+$' AND octet_length(topic) <= 249 AND topic NOT IN ('.', '..'))$$]
    ];
    last_seq bigint;
BEGIN
    LOCK TABLE outbox IN ACCESS EXCLUSIVE MODE;
    EXECUTE format('SELECT CASE WHEN is_called THEN last_value END FROM %s', pg_get_serial_sequence('outbox', 'seq'))
        INTO last_seq;
    IF last_seq IS NULL THEN
        last_seq := COALESCE((SELECT max(seq) FROM outbox), 0);
    END IF;
    FOR i IN 1 .. array_length(rules, 1) LOOP
        IF last_seq > 0 THEN
            EXECUTE format('ALTER TABLE outbox ADD CONSTRAINT %I CHECK (seq <= %s OR (%s)) NOT VALID',
                rules[i][1], last_seq, rules[i][2]);
        ELSE
            EXECUTE format('ALTER TABLE outbox ADD CONSTRAINT %I CHECK (%s)', rules[i][1], rules[i][2]);
        END IF;
    END LOOP;
END
$migration$;
-- +goose StatementEnd
