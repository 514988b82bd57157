-- Time partitions: reading a table's time partitioning, listing its
-- partitions and creating the coming ones.

-- name: LockTimePartitions :exec
-- Takes the transaction-level advisory lock (lock: sqlname.XactLock's
-- expression, of class sqlname.LockTimePartitions on the table) that
-- serializes the creation of one table's time partitions across
-- processes.
SELECT /* TEMPLATE: lock */

-- name: SetLockTimeout :exec
-- Bounds each wait for a lock in the rest of the transaction (lock_timeout:
-- a literal, partitionLockTimeout) while time partitions are created:
-- ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the table and ACCESS
-- EXCLUSIVE on its DEFAULT partition, and a wait behind a long
-- transaction must not queue producers behind it for long. The next round
-- tries again.
SET LOCAL lock_timeout = /* TEMPLATE: lock_timeout */

-- name: ReadTimePartitioning :one
-- A table's time partitioning as <table>_partitioning records it
-- (migration 00011): the interval in seconds and the partitions kept
-- ahead, NULL when pgoutbox does not keep the table's time partitions.
-- Through to_jsonb: a table from before migration 00011 (or adopted
-- before it) lacks the columns, and a missing column would abort the
-- caller's transaction.
SELECT extract(epoch FROM (to_jsonb(m)->>'time_partition_interval')::interval)::bigint AS interval_seconds,
  (to_jsonb(m)->>'time_partitions_ahead')::int AS ahead
FROM /* TEMPLATE: partitioning */ m

-- name: ListTimePartitions :many
-- The leaf partitions of the table @table (quoted), for
-- ListTimePartitions: each as regclass prints it, whether it is unlogged,
-- whether it is the DEFAULT partition, and its range bounds of created_at
-- read from its partition bound (NULL for DEFAULT, MINVALUE and
-- MAXVALUE); in the order of their bounds, the DEFAULT partition last.
-- None for a plain table, whose tree is itself, at level 0.
SELECT c.oid::regclass::text AS name, c.relpersistence = 'u' AS unlogged, b.bound = 'DEFAULT' AS is_default,
  (regexp_match(b.bound, '^FOR VALUES FROM \(''([^'']*)''\)'))[1]::timestamptz AS from_time,
  (regexp_match(b.bound, ' TO \(''([^'']*)''\)$'))[1]::timestamptz AS to_time
FROM pg_partition_tree(@table::regclass) p
JOIN pg_class c ON c.oid = p.relid
CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
WHERE p.isleaf AND p.level > 0
ORDER BY b.bound = 'DEFAULT', 4 NULLS FIRST, 1

-- name: CreateTimePartition :exec
-- Creates a time partition (partition: schema-qualified, quoted) as a
-- table of its own, like the outbox table with its defaults and
-- constraints and with the storage parameters every partition gets
-- (storage: PartitionStorage); AttachTimePartition then attaches
-- it. Created so, and not with CREATE TABLE ... PARTITION OF, which would
-- lock the table ACCESS EXCLUSIVE: attaching locks it in SHARE UPDATE
-- EXCLUSIVE mode only, so producers and relays go on meanwhile.
CREATE TABLE /* TEMPLATE: partition */ (LIKE /* TEMPLATE: table */ INCLUDING DEFAULTS INCLUDING CONSTRAINTS) WITH (/* TEMPLATE: storage */)

-- name: AttachTimePartition :exec
-- Attaches a time partition created by CreateTimePartition for the
-- rows with created_at in [from, to) (timestamptz literals, UTC):
-- PostgreSQL gives it the table's indexes and row triggers. It takes SHARE
-- UPDATE EXCLUSIVE on the table, ACCESS EXCLUSIVE on its DEFAULT
-- partition (whose rows it checks).
ALTER TABLE /* TEMPLATE: table */ ATTACH PARTITION /* TEMPLATE: partition */ FOR VALUES FROM (/* TEMPLATE: from */) TO (/* TEMPLATE: to */)

-- name: DefaultPartition :one
-- The DEFAULT partition of the partitioned table @table (quoted), as
-- regclass prints it; no row when it has none. CreateTimePartitions moves
-- the rows of a new partition's range out of it.
SELECT d.oid::regclass::text FROM pg_partitioned_table pt JOIN pg_class d ON d.oid = pt.partdefid WHERE pt.partrelid = @table::regclass

-- name: TableColumns :one
-- The columns of the table @table (quoted), quoted, comma-separated, in
-- their order: MoveFromDefault names them, so that it copies every column
-- whatever each partition's own column order.
SELECT string_agg(quote_ident(attname), ', ' ORDER BY attnum) FROM pg_attribute WHERE attrelid = @table::regclass AND attnum > 0 AND NOT attisdropped

-- name: DefaultHasRowsIn :one
-- Whether the DEFAULT partition (default: as regclass prints it) holds
-- rows whose created_at is in [from, to) (timestamptz literals, UTC): the
-- range of a time partition about to be attached, which ATTACH PARTITION
-- would refuse while they are there.
SELECT EXISTS (SELECT 1 FROM /* TEMPLATE: default */ WHERE created_at >= /* TEMPLATE: from */ AND created_at < /* TEMPLATE: to */)

-- name: LockForMove :exec
-- Before rows move from the DEFAULT partition into a new time partition:
-- locks the outbox table (and so each of its partitions) against every
-- writer, claim and mark until the partition is attached and the
-- transaction commits. A statement that waits for this lock reads the
-- table's partitions once it has it, and so finds a moved row in its new
-- partition; one that had found its partitions before (with a weaker lock
-- on the table only) could look for the row in the DEFAULT partition
-- alone and miss it (a lease's mark would then be lost). Plain reads (the
-- gauges, status) go on.
LOCK TABLE /* TEMPLATE: table */ IN EXCLUSIVE MODE

-- name: MoveFromDefault :execrows
-- Moves the rows of the DEFAULT partition (default) whose created_at is in
-- [from, to) into the new time partition (partition: schema-qualified,
-- quoted), a table of its own not yet attached: every column (columns:
-- TableColumns) as it was, seq, lease (locked_until, locked_by,
-- claim_token) and attempts included. The new table has no triggers
-- yet, so nothing recomputes a column; an identity column is a plain
-- column there, so seq keeps its value.
WITH moved AS (
  DELETE FROM /* TEMPLATE: default */ WHERE created_at >= /* TEMPLATE: from */ AND created_at < /* TEMPLATE: to */
  RETURNING /* TEMPLATE: columns */)
INSERT INTO /* TEMPLATE: partition */ (/* TEMPLATE: columns */) SELECT /* TEMPLATE: columns */ FROM moved
