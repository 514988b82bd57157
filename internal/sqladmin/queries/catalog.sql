-- What the package reads of the outbox table from the catalogs: its
-- schema, sequence, durability and partitions, and the role's privileges
-- on it.

-- name: TableSchema :one
-- The schema of the table @table (quoted), wherever the search_path found
-- it: its time partitions and adopt's row-check function go there.
SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = @table::regclass

-- name: ChildPartitions :many
-- The names (unqualified) of the partitions of the table @table (quoted),
-- one level down: CreateTimePartitions skips those that exist.
SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = @table::regclass

-- name: SeqOf :fragment
-- A fragment, not a statement: the sequence (its oid) of the seq column
-- of the table c, or NULL when it has none.
--
-- It is found through pg_depend, as pg_get_serial_sequence finds it (an
-- identity column's sequence depends on it with deptype 'i', a serial's
-- or one adopt created with 'a'): pg_get_serial_sequence raises an error
-- for a missing table or column, and the planner may evaluate it with
-- constant arguments (estimating a selectivity) even where a CASE would
-- not. An index on the column depends on it with deptype 'a' too, so only
-- a sequence (relkind 'S') is taken.
SELECT d.objid FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
  JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
  WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid
    AND a.attname = 'seq' AND NOT a.attisdropped AND d.deptype IN ('a', 'i') LIMIT 1

-- name: UnloggedPartition :fragment
-- A fragment, not a statement: the first unlogged partition, at any
-- level, of the table c, as regclass prints it; NULL when it has none or
-- is not partitioned. A partitioned table's own relpersistence says
-- nothing about its partitions', and a crash empties an unlogged one.
SELECT min(u.oid::regclass::text) FROM pg_partition_tree(c.oid) pt JOIN pg_class u ON u.oid = pt.relid
  WHERE c.relkind = 'p' AND pt.level > 0 AND u.relpersistence = 'u'

-- name: Durability :one
-- The persistence of the table @table (quoted) and of its seq sequence,
-- from the catalog alone (no row of the table is read), for
-- CheckDurability: whether the table exists, whether it is unlogged, its
-- sequence as regclass prints it (NULL without one) and whether that is
-- unlogged, and on a partitioned table its first unlogged partition
-- (UnloggedPartition). A table that does not exist is one row of
-- NULLs and false, not an error: Migrate creates it logged.
SELECT c.oid IS NOT NULL AS table_exists, coalesce(c.relpersistence = 'u', false) AS unlogged,
  s.oid::regclass::text AS sequence, s.relpersistence = 'u' AS sequence_unlogged,
  (/* TEMPLATE: unlogged_partition */) AS unlogged_partition
FROM (SELECT to_regclass(@table) AS oid) r
LEFT JOIN pg_class c ON c.oid = r.oid
LEFT JOIN pg_class s ON s.oid = (/* TEMPLATE: seq_of */)

-- name: SequenceOf :one
-- The sequence of the seq column of the table @table (quoted) as
-- regclass prints it (quoted and schema-qualified as needed), NULL when
-- the column has none (SeqOf). SequenceOf.
SELECT (/* TEMPLATE: seq_of */)::regclass::text FROM pg_class c WHERE c.oid = @table::regclass

-- name: InspectTable :one
-- What Inspect reads of the table @table (quoted) from the catalog:
-- whether it is unlogged, its seq sequence (SeqOf), its first
-- unlogged partition (UnloggedPartition), whether it is partitioned
-- and then how many leaf partitions it has. A missing table is an error.
SELECT c.relpersistence = 'u' AS unlogged, (/* TEMPLATE: seq_of */)::regclass::text AS sequence,
  (/* TEMPLATE: unlogged_partition */) AS unlogged_partition, c.relkind = 'p' AS partitioned,
  (SELECT count(*) FROM pg_partition_tree(c.oid) pt WHERE c.relkind = 'p' AND pt.isleaf) AS partitions
FROM pg_class c WHERE c.oid = @table::regclass

-- name: MissingPrivileges :one
-- The current role's privileges on what the relay uses, in one statement
-- of catalog functions, for MissingPrivileges (docs/database.md): a role
-- without one of them fails one step of the relay, and the failing
-- statement names only the first privilege missing; this names them all.
-- Each object is found with to_regclass (quoted names): @table, its order
-- guard @guard, @partitioning, @relays and @partitions (migration 00009),
-- and its seq sequence (SeqOf); one that does not exist gives NULL,
-- not an error.
--
-- Returns the role; SELECT, UPDATE and DELETE on the table; SELECT,
-- INSERT, UPDATE and DELETE on the order guard; the sequence and SELECT
-- (or USAGE) on it; membership in pg_read_all_stats; SELECT and UPDATE on
-- <table>_partitioning; SELECT, INSERT, UPDATE and DELETE on
-- <table>_relays; SELECT and UPDATE on <table>_partitions; on a
-- partitioned table, membership in its owner role and CREATE on its
-- schema (NULL on a plain table); and the table's owner.
SELECT current_user::text AS role,
  has_table_privilege(c.oid, 'SELECT') AS table_select, has_table_privilege(c.oid, 'UPDATE') AS table_update,
  has_table_privilege(c.oid, 'DELETE') AS table_delete,
  has_table_privilege(g.oid, 'SELECT') AS guard_select, has_table_privilege(g.oid, 'INSERT') AS guard_insert,
  has_table_privilege(g.oid, 'UPDATE') AS guard_update, has_table_privilege(g.oid, 'DELETE') AS guard_delete,
  s.oid::regclass::text AS sequence, has_sequence_privilege(s.oid, 'SELECT') OR has_sequence_privilege(s.oid, 'USAGE') AS sequence_select,
  pg_has_role('pg_read_all_stats', 'USAGE') AS read_all_stats,
  has_table_privilege(m.oid, 'SELECT') AS partitioning_select, has_table_privilege(m.oid, 'UPDATE') AS partitioning_update,
  has_table_privilege(r.oid, 'SELECT') AS relays_select, has_table_privilege(r.oid, 'INSERT') AS relays_insert,
  has_table_privilege(r.oid, 'UPDATE') AS relays_update, has_table_privilege(r.oid, 'DELETE') AS relays_delete,
  has_table_privilege(p.oid, 'SELECT') AS partitions_select, has_table_privilege(p.oid, 'UPDATE') AS partitions_update,
  (SELECT pg_has_role(k.relowner, 'USAGE') FROM pg_class k WHERE k.oid = c.oid AND k.relkind = 'p') AS owner_member,
  (SELECT has_schema_privilege(k.relnamespace, 'CREATE') FROM pg_class k WHERE k.oid = c.oid AND k.relkind = 'p') AS schema_create,
  (SELECT pg_get_userbyid(k.relowner)::text FROM pg_class k WHERE k.oid = c.oid) AS owner
FROM (SELECT to_regclass(@table) AS oid) c, (SELECT to_regclass(@guard) AS oid) g,
  (SELECT to_regclass(@partitioning) AS oid) m, (SELECT to_regclass(@relays) AS oid) r, (SELECT to_regclass(@partitions) AS oid) p,
  LATERAL (SELECT (/* TEMPLATE: seq_of */) AS oid) s

-- name: Now :one
-- The database's clock: EnsureTimePartitions creates the partitions
-- around the database's now(), which created_at defaults to, not the
-- process's.
SELECT now()

-- name: IsPartitioned :one
-- Whether the table @table (quoted) is partitioned: outbox-relay run
-- refuses --retention-drop-partitions on a table that is not.
SELECT relkind = 'p' FROM pg_class WHERE oid = @table::regclass
