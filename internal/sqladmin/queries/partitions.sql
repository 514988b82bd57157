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
