-- +goose Up
-- The rules the Go writer (outbox.Writer.Add) checks before it writes, as
-- CHECK constraints, so that a plain-SQL writer cannot insert a row the Go
-- writer would refuse (both refuse the same rows: outbox_test.go's
-- TestWriterValidationAgreesWithTableConstraints). A refused INSERT fails
-- with SQLSTATE 23514 (check_violation) naming the constraint.
--
-- outbox_aggregate_id_check: not empty, at most 1024 bytes
--   (outbox.MaxAggregateIDBytes; octet_length counts bytes in the
--   database's encoding, UTF-8 for the writer's count). The aggregate ID is
--   a key of outbox_unpublished_aggregate_idx, and a B-tree refuses an index
--   row over 2704 bytes (a third of an 8 kB page; SQLSTATE 54000 "index row
--   size exceeds btree version 4 maximum", nbtutils.c _bt_check_third_page):
--   without the check a long ID fails there instead, with a less clear
--   error.
-- outbox_event_type_check: not empty.
-- outbox_headers_check: SQL NULL, or a JSON object whose values are all
--   strings, with no empty name and none of the names the relay sets itself
--   (event_id, event_type, aggregate_id). jsonb_path_exists (without _tz)
--   and ?| (jsonb_exists_any) are IMMUTABLE, as a CHECK expression must be.
--   The path is strict: lax mode unwraps arrays and would take {"a": ["x"]}
--   for a string; and strict $.* raises an error on a non-object, so
--   jsonb_typeof comes first.
-- outbox_topic_check: SQL NULL, or a legal Kafka topic name, as the broker
--   checks it (org.apache.kafka.common.internals.Topic.validate) and
--   outbox.ValidateTopic does: 1 to 249 characters of [a-zA-Z0-9._-], not
--   "." or ".." (the characters are ASCII, so bytes are characters).
--   PostgreSQL's regex ranges compare code points, whatever the collation.
--   The length is not a regex bound: {1,249} costs about 10 us per row, the
--   whole check about 0.3 us.
--
-- All four add about 1.5 us to each inserted row (100,000-row INSERT ...
-- SELECT with headers and topic: 0.49 s without, 0.61-0.69 s with).
--
-- Rows written before this migration are exempt: on a table that already
-- has rows, each check is "seq <= N OR (rule)", N the last seq handed out
-- (read under the ACCESS EXCLUSIVE lock, so no inserting transaction is in
-- flight). NOT VALID alone would not do: it skips existing rows when the
-- constraint is added, but PostgreSQL checks every new row version, so the
-- relay's own UPDATEs of an old row that breaks a rule (the claim's lease,
-- the mark's published_at) would fail, and the whole claim with them. The
-- old rows are relayed as before (lease/headers.go turns header values of
-- other JSON types into text and refuses only a document that is not an
-- object).
--
-- They are added NOT VALID on such a table, so no row is scanned: every
-- existing row passes by construction, and VALIDATE CONSTRAINT in this
-- migration's transaction would scan the whole table (published history
-- included) while holding the ACCESS EXCLUSIVE lock that ADD CONSTRAINT
-- took, blocking every producer's INSERT and the relay meanwhile. They can
-- be validated later, outside a long transaction (VALIDATE takes only a
-- SHARE UPDATE EXCLUSIVE lock; producers keep inserting while it scans):
--   ALTER TABLE outbox VALIDATE CONSTRAINT outbox_aggregate_id_check;
-- On a table that never had a row (a new installation) the checks are the
-- plain rules, added valid (the scan of an empty table costs nothing).
--
-- A caveat: with the seq identity's CACHE raised above the default 1, a
-- session may insert rows after this migration with seqs it cached before
-- (at most CACHE per session); they are under N and go unchecked.
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
        -- No seq handed out yet; rows could only come from an INSERT with
        -- OVERRIDING SYSTEM VALUE.
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

-- +goose Down
ALTER TABLE outbox
    DROP CONSTRAINT IF EXISTS outbox_topic_check,
    DROP CONSTRAINT IF EXISTS outbox_headers_check,
    DROP CONSTRAINT IF EXISTS outbox_event_type_check,
    DROP CONSTRAINT IF EXISTS outbox_aggregate_id_check;
