-- Adopt: the statements that turn an existing table into an outbox table,
-- and the row checks it installs.

-- name: XactLock :exec
-- Takes a transaction-level advisory lock (lock: sqlname.XactLock's
-- expression, of a class on the table), which serializes adopt across
-- processes.
SELECT /* TEMPLATE: lock */

-- name: LockTable :exec
-- Adopt locks the table first: adding the columns and constraints needs
-- the ACCESS EXCLUSIVE lock in the end, and a weaker lock taken on the way
-- (ALTER TABLE SET, CREATE TRIGGER) deadlocks with a producer that read
-- the table and then inserts into it.
LOCK TABLE /* TEMPLATE: table */ IN ACCESS EXCLUSIVE MODE

-- name: SetPartitionStorage :exec
-- SetStorage for an adopted partitioned table, which has no storage
-- and refuses them: the storage parameters (storage_literal:
-- PartitionStorage as a literal) go to each of its leaf partitions, at
-- every level (table_literal: the quoted table as a literal); partitions
-- created later need them too (PartitionStorage).
DO $adopt$ DECLARE p regclass; BEGIN
  FOR p IN SELECT relid FROM pg_partition_tree(/* TEMPLATE: table_literal */::regclass) WHERE isleaf AND level > 0 LOOP
    EXECUTE format('ALTER TABLE %s SET (%s)', p, /* TEMPLATE: storage_literal */);
  END LOOP;
END $adopt$

-- name: SetStorage :exec
-- The storage parameters the migrations give the outbox table (storage:
-- PartitionStorage), for an adopted plain table. Set before the seq
-- column is added: that rewrites the table, and the rewrite packs the
-- backlog by this fillfactor. A partitioned table has no storage and
-- refuses them: SetPartitionStorage.
ALTER TABLE /* TEMPLATE: table */ SET (/* TEMPLATE: storage */)

-- name: CreateSeqSequence :exec
-- The sequence of seq on an adopted partitioned table that has
-- partitions (SeqNextvalColumn): PostgreSQL (before 17) refuses to
-- add an identity column to such a table.
CREATE SEQUENCE IF NOT EXISTS /* TEMPLATE: sequence */ AS bigint

-- name: SeqIdentityColumn :fragment
-- A fragment of AdoptColumns: seq as an identity column, whose
-- sequence the table owns; adding it fills it in for the existing rows,
-- which rewrites the table.
ADD COLUMN IF NOT EXISTS seq bigint GENERATED ALWAYS AS IDENTITY,

-- name: SeqNextvalColumn :fragment
-- A fragment of AdoptColumns, for a partitioned table, to which
-- PostgreSQL (before 17) refuses to add an identity column when it has
-- partitions: seq filled by nextval of a sequence
-- (CreateSeqSequence; sequence_literal: its quoted name as a
-- literal) that the column owns (OwnSeqSequence), as serial's is,
-- which the claim floor and the checks find the same way (pg_depend).
-- Its default, unlike GENERATED ALWAYS, lets an INSERT give a seq of its
-- own: producers must not.
ADD COLUMN IF NOT EXISTS seq bigint NOT NULL DEFAULT nextval(/* TEMPLATE: sequence_literal */::regclass),

-- name: AdoptCaptureOrder :exec
-- The order the rows already in the table were written in, read before
-- AdoptColumns adds seq: adding it rewrites the table and numbers the
-- rows in the order they lie on disk, which is not the order they were
-- written in once rows were deleted and their space reused (a Debezium
-- table whose producers delete their rows). Rows are ordered by the
-- transaction that wrote them (age(xmin), oldest first: the rewrite loses
-- xmin), then by the statement within it (cmin), then by their place on
-- disk. A transaction's ID is taken at its first write, not its commit:
-- two transactions writing one aggregate at once may still be numbered
-- in the order they began writing. Kept by id, for
-- AdoptRenumberSeq, until the transaction ends; none when the table
-- has seq already (a concurrent adopt added it before this one got the
-- table's lock, and producers may have written rows since).
CREATE TEMP TABLE pgoutbox_adopt_order ON COMMIT DROP AS
  SELECT id, row_number() OVER (ORDER BY age(xmin) DESC, cmin::text::bigint, tableoid, ctid) AS n FROM /* TEMPLATE: table */
  WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = /* TEMPLATE: table_literal */::regclass
    AND a.attname = 'seq' AND NOT a.attisdropped)

-- name: AdoptColumns :exec
-- The relay's bookkeeping columns on an adopted table, all with defaults
-- (or nullable) so that the producers' INSERTs keep working: seq
-- (seq_column: SeqIdentityColumn or SeqNextvalColumn), then
-- the columns migration 00001 gives the outbox table.
ALTER TABLE /* TEMPLATE: table */
  /* TEMPLATE: seq_column */
  ADD COLUMN IF NOT EXISTS headers jsonb,
  ADD COLUMN IF NOT EXISTS topic text,
  ADD COLUMN IF NOT EXISTS created_at timestamptz NOT NULL DEFAULT now(),
  ADD COLUMN IF NOT EXISTS published_at timestamptz,
  ADD COLUMN IF NOT EXISTS locked_until timestamptz,
  ADD COLUMN IF NOT EXISTS locked_by text,
  ADD COLUMN IF NOT EXISTS claim_token uuid,
  ADD COLUMN IF NOT EXISTS attempts integer NOT NULL DEFAULT 0,
  ADD COLUMN IF NOT EXISTS last_error text,
  ADD COLUMN IF NOT EXISTS dead_lettered_at timestamptz

-- name: OwnSeqSequence :exec
-- Makes seq own its sequence (SeqNextvalColumn), as a serial
-- column's: dropped with the column, and found through pg_depend
-- (SeqOf) like an identity's.
ALTER SEQUENCE /* TEMPLATE: sequence */ OWNED BY /* TEMPLATE: table */.seq

-- name: AdoptSeqByDefault :exec
-- Lets AdoptRenumberSeq set seq, an identity column GENERATED
-- ALWAYS (SeqIdentityColumn), for the rows already in the table;
-- AdoptSeqAlways puts it back in the same transaction.
ALTER TABLE /* TEMPLATE: table */ ALTER COLUMN seq SET GENERATED BY DEFAULT

-- name: AdoptRenumberSeq :exec
-- Gives the rows already in the table the seqs of the order they were
-- written in (AdoptCaptureOrder), in place of the order on disk
-- that adding seq gave them: the same seqs (1..n), permuted. Only when
-- every row has an id of its own (no NULL, no repeat): otherwise the rows
-- keep the order on disk.
UPDATE /* TEMPLATE: table */ t SET seq = o.n FROM pgoutbox_adopt_order o
WHERE t.id = o.id AND t.seq <> o.n
  AND (SELECT count(*) = count(DISTINCT id) FROM pgoutbox_adopt_order)

-- name: AdoptSeqAlways :exec
-- seq GENERATED ALWAYS again (AdoptSeqByDefault).
ALTER TABLE /* TEMPLATE: table */ ALTER COLUMN seq SET GENERATED ALWAYS

-- name: AdoptUnpublishedSeqIndex :exec
-- Migration 00001's index of unpublished rows in seq order, for an
-- adopted table (index: <table>_unpublished_seq_idx): claim order, the
-- lowest seq among unpublished rows. Published rows leave it, so kept
-- published rows cost the claim nothing.
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (seq) WHERE published_at IS NULL

-- name: AdoptUnpublishedAggregateIndex :exec
-- Migration 00001's index of unpublished rows by aggregate, for an
-- adopted table (index: <table>_unpublished_aggregate_idx; aggregate: the
-- aggregate ID column): the claim's per-aggregate order guard ("is an
-- earlier event of this aggregate still leased or backing off?") is one
-- probe of it per candidate row. Creating it fails (SQLSTATE 54000) if an
-- existing aggregate ID is too long for a B-tree entry (about 2,700
-- bytes).
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (/* TEMPLATE: aggregate */, seq) WHERE published_at IS NULL

-- name: AdoptDeadLettersIndex :exec
-- Migration 00002's index of dead letters, for an adopted table (index:
-- <table>_dead_letters_idx): dead letters are few; it keeps counting and
-- listing them cheap.
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (seq) WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL

-- name: AdoptPublishedAtIndex :exec
-- Migration 00004's index of published rows by publication time, for an
-- adopted table (index: <table>_published_at_idx), which retention reads.
CREATE INDEX IF NOT EXISTS /* TEMPLATE: index */ ON /* TEMPLATE: table */ (published_at) WHERE published_at IS NOT NULL

-- name: AdoptOrderGuard :exec
-- The claims' order guard beside an adopted table (guard:
-- <table>_order_guard), as migration 00005 creates it.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: guard */ (key text PRIMARY KEY, until timestamptz NOT NULL)

-- name: PayloadColumnCheck :exec
-- Fails unless the table has the payload column: the insert trigger reads
-- it, and one the table lacks would fail every producer's INSERT after a
-- successful adopt (PL/pgSQL resolves the body's columns when it first
-- runs). LIMIT 0: no row is read.
SELECT pg_column_size(/* TEMPLATE: payload */) FROM /* TEMPLATE: table */ LIMIT 0

-- name: DropConstraint :fragment
-- A fragment of DropRowCheckConstraints: drops one CHECK
-- constraint (constraint: quoted), if it exists.
DROP CONSTRAINT IF EXISTS /* TEMPLATE: constraint */

-- name: PlanRowChecks :exec
-- Plans the row checks (rules: each rule of row_check_*.sql in
-- parentheses, separated by commas) on the table's columns, as "new":
-- PL/pgSQL checks a body's types only when it first runs, and a headers
-- column of type json would otherwise make every producer INSERT fail
-- after a successful adopt. LIMIT 0: no row is read.
SELECT /* TEMPLATE: rules */ FROM /* TEMPLATE: table */ AS "new" LIMIT 0

-- name: DropRowCheckConstraints :exec
-- Drops the CHECK constraints an earlier adopt added for the row checks
-- (drops: DropConstraint for each, separated by commas): the
-- triggers replace them (see migrations/00008_row_check_trigger.sql).
ALTER TABLE /* TEMPLATE: table */
  /* TEMPLATE: drops */

-- name: CreateRowCheckFunction :exec
-- The row-check trigger function of an adopted table (function: in the
-- table's schema), as migration 00008 creates it (body_literal: the
-- literal of RowCheckBody): with search_path pg_catalog, pg_temp,
-- so that a writer's search_path cannot shadow what the body calls.
CREATE OR REPLACE FUNCTION /* TEMPLATE: function */() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS /* TEMPLATE: body_literal */

-- name: DropTrigger :exec
-- Drops the trigger (quoted) of the table, if it exists, before adopt
-- creates it again: CREATE TRIGGER has no OR REPLACE before PostgreSQL
-- 14, and adopt must be idempotent.
DROP TRIGGER IF EXISTS /* TEMPLATE: trigger */ ON /* TEMPLATE: table */

-- name: CreateRowCheckInsertTrigger :exec
-- The row checks of a new row of an adopted table (trigger:
-- <table>_row_checks), as migration 00008 creates them.
CREATE TRIGGER /* TEMPLATE: trigger */ BEFORE INSERT ON /* TEMPLATE: table */
    FOR EACH ROW EXECUTE FUNCTION /* TEMPLATE: function */()

-- name: CreateRowCheckUpdateTrigger :exec
-- The row checks of an updated row of an adopted table (trigger:
-- <table>_row_checks_on_update), run only by an UPDATE of a checked
-- column (columns, separated by commas), which the relay's updates never
-- name. AFTER, not BEFORE UPDATE, for the reason migration 00008 gives: a
-- BEFORE UPDATE trigger would lock every row the relay updates.
CREATE TRIGGER /* TEMPLATE: trigger */ AFTER UPDATE OF /* TEMPLATE: columns */ ON /* TEMPLATE: table */
    FOR EACH ROW EXECUTE FUNCTION /* TEMPLATE: function */()

-- name: RowCheckAggregateID :fragment
-- A fragment, not a statement: migration 00008's rule on the new row's
-- aggregate ID (aggregate: its column, quoted), cast to text so that it
-- applies to varchar and other columns, as the relay reads them: not
-- empty, at most max_bytes (outbox.MaxAggregateIDBytes) bytes as
-- octet_length counts them. One line: it goes into the trigger function's
-- body, which must stay the migration's.
NEW./* TEMPLATE: aggregate */::text <> '' AND octet_length(NEW./* TEMPLATE: aggregate */::text) <= /* TEMPLATE: max_bytes */

-- name: RowCheckEventType :fragment
-- A fragment, not a statement: migration 00008's rule on the new row's
-- event type (event_type: its column, quoted), cast to text: not empty.
NEW./* TEMPLATE: event_type */::text <> ''

-- name: RowCheckHeaders :fragment
-- A fragment, not a statement: migration 00008's rule on headers: SQL
-- NULL, or a JSON object of strings with no empty or reserved name
-- (event_id, event_type, aggregate_id). One line: it goes into the
-- trigger function's body, which must stay the migration's.
NEW.headers IS NULL OR (jsonb_typeof(NEW.headers) = 'object' AND NOT jsonb_path_exists(NEW.headers, 'strict $.* ? (@.type() != "string")') AND NOT (NEW.headers ?| ARRAY['', 'event_id', 'event_type', 'aggregate_id']))

-- name: RowCheckTopic :fragment
-- A fragment, not a statement: migration 00008's rule on topic: SQL NULL,
-- or a legal Kafka topic name (1 to 249 characters of a-z A-Z 0-9 . _ -,
-- not "." or ".."). One line: it goes into the trigger function's body,
-- which must stay the migration's.
NEW.topic IS NULL OR (NEW.topic ~ '^[a-zA-Z0-9._-]+$' AND octet_length(NEW.topic) <= 249 AND NEW.topic NOT IN ('.', '..'))

-- name: RowCheckRule :fragment
-- A fragment, not a statement: one rule of the row-check trigger function
-- (RowCheckBody) as migration 00008 writes it: unless the rule
-- (rule: a row_check_*.sql) holds, a check_violation (SQLSTATE 23514)
-- naming its constraint (constraint_literal) with PostgreSQL's own
-- message for a CHECK constraint, and a DETAIL giving the rule
-- (detail_literal). A rule that evaluates to NULL passes, as a CHECK
-- constraint's does. Its lines, indentation included, must stay the
-- migration's.
    IF NOT (/* TEMPLATE: rule */) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = /* TEMPLATE: constraint_literal */,
            TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
            MESSAGE = format('new row for relation "%s" violates check constraint "%s"', TG_TABLE_NAME, /* TEMPLATE: constraint_literal */),
            DETAIL = /* TEMPLATE: detail_literal */;
    END IF;

-- name: RowCheckBody :fragment
-- A fragment, not a statement: the body of an adopted table's row-check
-- trigger function (CreateRowCheckFunction), its rules
-- (RowCheckRule each, one after the other) and then RETURN NEW. The
-- caller puts it between newlines, so that it is, byte for byte, the body
-- migration 00008 gives the outbox table's function (the tests compare
-- them).
BEGIN
/* TEMPLATE: rules */
    RETURN NEW;
END
