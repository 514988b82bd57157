-- Key partitions (migration 00009's tables, functions and trigger, as
-- adopt creates them) and their backfill; time partitions.

-- name: AdoptKeyPartitionColumns :exec
-- Adopt's version of migrations 00009 and 00010 (keyPartitionStatements),
-- first step: the key_partition and payload_size columns, filled in by
-- the insert trigger (CreateKeyPartitionTrigger). Nullable: adding
-- them is a catalog change, no table rewrite.
ALTER TABLE /* TEMPLATE: table */ ADD COLUMN IF NOT EXISTS key_partition integer, ADD COLUMN IF NOT EXISTS payload_size integer

-- name: AdoptPartitioningTable :exec
-- Migration 00009's <table>_partitioning for an adopted table: one row,
-- the number of key partitions, a generation bumped by every change of
-- who owns what, and when the backfill finished.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: partitioning */ (
    singleton     boolean     PRIMARY KEY DEFAULT true CHECK (singleton),
    partitions    integer     NOT NULL CHECK (partitions BETWEEN 1 AND 4096),
    generation    bigint      NOT NULL DEFAULT 0,
    backfilled_at timestamptz)

-- name: AdoptPartitioningTimeColumns :exec
-- Migration 00011's columns of <table>_partitioning for an adopted table:
-- its time partitions are its owner's (NULL), but the columns are read.
ALTER TABLE /* TEMPLATE: partitioning */ ADD COLUMN IF NOT EXISTS time_partition_interval interval, ADD COLUMN IF NOT EXISTS time_partitions_ahead integer

-- name: AdoptPartitioningRow :exec
-- The row of <table>_partitioning, with the number of key partitions
-- (partition_count) unless an earlier adopt chose it: an adopted table
-- keeps its partition count.
INSERT INTO /* TEMPLATE: partitioning */ (partitions) VALUES (/* TEMPLATE: partition_count */) ON CONFLICT DO NOTHING

-- name: AdoptRelaysTable :exec
-- Migration 00009's <table>_relays for an adopted table: the members
-- sharing the key partitions, each alive until its until.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: relays */ (
    member     text        PRIMARY KEY,
    relay_id   text        NOT NULL,
    started_at timestamptz NOT NULL DEFAULT now(),
    renewed_at timestamptz NOT NULL DEFAULT now(),
    until      timestamptz NOT NULL)

-- name: AdoptPartitionsTable :exec
-- Migration 00009's <table>_partitions for an adopted table: who owns
-- each key partition, since when, and how often it changed hands.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: partitions */ (
    partition integer     PRIMARY KEY,
    owner     text,
    epoch     bigint      NOT NULL DEFAULT 0,
    since     timestamptz,
    handovers bigint      NOT NULL DEFAULT 0)

-- name: AdoptPartitionsRows :exec
-- One row of <table>_partitions per key partition, owned by nobody, for
-- the partition count <table>_partitioning holds (an earlier adopt may
-- have chosen it).
INSERT INTO /* TEMPLATE: partitions */ (partition) SELECT generate_series(0, (SELECT partitions FROM /* TEMPLATE: partitioning */) - 1) ON CONFLICT DO NOTHING

-- name: AdoptKeyPartitionFunctions :exec
-- The functions of migrations 00009 and 00010, for an adopted table:
-- key_partition_fn, a row's key partition from its aggregate ID (the
-- project's hash, the same as outbox.KeyPartition: the first four bytes
-- of the SHA-256 of the ID's UTF-8 bytes, big-endian, modulo the number
-- of partitions), and set_key_partition_fn, the insert trigger's, which
-- fills in key_partition and payload_size (set_key_partition_body: the
-- literal of KeyPartitionTriggerBody, itself a format() string).
-- The partition count the table has (an earlier adopt may have chosen it)
-- goes into both, through a DO block and format(); both run with
-- search_path pg_catalog, pg_temp, so that a writer's search_path cannot
-- change what they call. The functions' names reach format() as its
-- arguments (the *_literal slots), never inside its format string, so
-- that a '%' in a name is not read as a placeholder, and the DO block's
-- dollar quote (do_tag) is one that no name holds.
DO /* TEMPLATE: do_tag */ DECLARE n integer := (SELECT partitions FROM /* TEMPLATE: partitioning */); BEGIN
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %1$s(aggregate_id text) RETURNS integer
    LANGUAGE sql IMMUTABLE STRICT PARALLEL SAFE SET search_path = pg_catalog, pg_temp
    AS 'SELECT (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %2$s)::integer FROM (SELECT sha256(convert_to(aggregate_id, ''UTF8'')) AS h) s'$f$,
    /* TEMPLATE: key_partition_fn_literal */, n);
  EXECUTE format($f$CREATE OR REPLACE FUNCTION %1$s() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS %2$L$f$,
    /* TEMPLATE: set_key_partition_fn_literal */, format(/* TEMPLATE: set_key_partition_body */, n));
END /* TEMPLATE: do_tag */

-- name: KeyPartitionTriggerBody :fragment
-- A fragment, not a statement: the body of an adopted table's insert
-- trigger function (AdoptKeyPartitionFunctions), which fills in a
-- new row's key_partition from its aggregate ID (aggregate: its column,
-- quoted) and its payload_size (PayloadSize or
-- PayloadSizeCompressed, its % doubled). It is a format() string:
-- %s is the number of key partitions, %% a %.
DECLARE h bytea := sha256(convert_to(NEW./* TEMPLATE: aggregate */::text, 'UTF8')); BEGIN NEW.key_partition := (((get_byte(h, 0)::bigint << 24) | (get_byte(h, 1) << 16) | (get_byte(h, 2) << 8) | get_byte(h, 3)) %% %s)::integer; NEW.payload_size := /* TEMPLATE: payload_size */; RETURN NEW; END

-- name: PayloadSize :fragment
-- A fragment, not a statement: the size migration 00010's trigger writes
-- to payload_size, for the payload column of the new row (payload: the
-- column, quoted), on PostgreSQL 13, which has no pg_column_compression:
-- pg_column_size alone. NULL is 0. PayloadSizeCompressed is the
-- size on later versions.
coalesce(pg_column_size(NEW./* TEMPLATE: payload */), 0)

-- name: PayloadSizeCompressed :fragment
-- A fragment, not a statement: the size migration 00010's trigger writes
-- to payload_size, for the payload column of the new row (payload: the
-- column, quoted): its pg_column_size, uncompressed in a BEFORE INSERT
-- trigger, O(1); a value already compressed there (INSERT ... SELECT of a
-- stored payload) is measured as text instead. NULL is 0. Needs
-- pg_column_compression (PostgreSQL 14+; PayloadSize before).
CASE WHEN pg_column_compression(NEW./* TEMPLATE: payload */) IS NULL THEN coalesce(pg_column_size(NEW./* TEMPLATE: payload */), 0) ELSE octet_length(NEW./* TEMPLATE: payload */::text) END

-- name: CreateKeyPartitionTrigger :exec
-- The insert trigger of an adopted table (migration 00009's
-- <table>_key_partition_fill): it runs set_key_partition_fn on each new
-- row, whatever writes it, to fill in key_partition and payload_size.
-- There is no BEFORE UPDATE trigger: it would lock every row the relay
-- updates (see migration 00008).
CREATE TRIGGER /* TEMPLATE: trigger */ BEFORE INSERT ON /* TEMPLATE: table */ FOR EACH ROW EXECUTE FUNCTION /* TEMPLATE: set_key_partition_fn */()

-- name: PartitionCount :one
-- The table's number of key partitions, fixed when migration 00009 ran:
-- migrate refuses a MigrateOptions.Partitions other than it.
SELECT partitions FROM /* TEMPLATE: partitioning */

-- name: Backfilled :one
-- Whether the key partitions of the table's unpublished rows written
-- before migration 00009 have been filled in (<table>_partitioning's
-- backfilled_at, MarkBackfilled): migrate and adopt skip the
-- backfill then, and the relay refuses a table without it.
SELECT backfilled_at IS NOT NULL FROM /* TEMPLATE: partitioning */

-- name: MarkBackfilled :exec
-- Records that the backfill of key partitions is done (Backfilled),
-- and bumps the generation so that running relays rebalance.
UPDATE /* TEMPLATE: partitioning */ SET backfilled_at = now(), generation = generation + 1

-- name: BackfillKeyPartitions :one
-- One batch of the backfill of key_partition, for the unpublished rows
-- that predate migration 00009 (rows inserted since get theirs from the
-- insert trigger): the next batch_size rows in seq order after seq
-- @after, through the unpublished rows' index, so that each batch reads
-- only its own rows and is its own transaction of a few milliseconds
-- (writers and relays are never held up behind it). Each row's partition
-- is key_partition_fn of its aggregate ID (the aggregate column). Returns
-- the batch's highest seq, where the next batch starts; NULL when no row
-- is left.
--
-- On a plain table a row is named by ctid; a partitioned table's
-- statement is BackfillKeyPartitionsPartitioned.
WITH batch AS (
  SELECT ctid, seq FROM /* TEMPLATE: table */ WHERE published_at IS NULL AND seq > @after ORDER BY seq LIMIT /* TEMPLATE: batch_size */
), filled AS (
  UPDATE /* TEMPLATE: table */ SET key_partition = /* TEMPLATE: key_partition_fn */(/* TEMPLATE: aggregate */::text)
  WHERE ctid = ANY(ARRAY(SELECT ctid FROM batch)) AND key_partition IS NULL
)
SELECT max(seq) FROM batch

-- name: BackfillKeyPartitionsPartitioned :one
-- BackfillKeyPartitions on a partitioned table: there a ctid names
-- a row only within its partition, so rows are named by partition
-- (tableoid) and ctid, and created_at (the partition key of a
-- time-partitioned table) lets the executor look in the row's partition
-- alone.
WITH batch AS (
  SELECT tableoid, ctid, created_at, seq FROM /* TEMPLATE: table */ WHERE published_at IS NULL AND seq > @after ORDER BY seq LIMIT /* TEMPLATE: batch_size */
), filled AS (
  UPDATE /* TEMPLATE: table */ o SET key_partition = /* TEMPLATE: key_partition_fn */(o./* TEMPLATE: aggregate */::text)
  FROM batch b WHERE o.tableoid = b.tableoid AND o.ctid = b.ctid AND o.created_at = b.created_at AND o.key_partition IS NULL
)
SELECT max(seq) FROM batch

-- name: SetTimePartitioning :one
-- Records a table's time partitioning in <table>_partitioning
-- (MigrateOptions.TimePartitioned): the interval, @interval_seconds, only
-- if none is recorded yet (it is fixed when the table is created), and
-- the partitions kept ahead, @ahead, only if the interval recorded is
-- that one (giving TimePartitionsAhead again changes it). Returns the
-- interval recorded, in seconds: one other than @interval_seconds is the
-- caller's error.
UPDATE /* TEMPLATE: partitioning */ SET time_partition_interval = coalesce(time_partition_interval, @interval_seconds * interval '1 second'), time_partitions_ahead = CASE WHEN time_partition_interval IS NULL OR time_partition_interval = @interval_seconds * interval '1 second' THEN @ahead ELSE time_partitions_ahead END
RETURNING extract(epoch FROM time_partition_interval)::bigint

-- name: CreateDefaultPartition :exec
-- Creates the DEFAULT partition of a time-partitioned outbox table
-- (DefaultPartitionName, in the table's schema), for the rows no time
-- partition covers, with the storage parameters every partition gets
-- (storage: PartitionStorage), which the partitioned table itself has no
-- storage for.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: partition */ PARTITION OF /* TEMPLATE: table */ DEFAULT WITH (/* TEMPLATE: storage */)
