-- What the package reads of the table from the catalogs: its kind,
-- columns, schema, sequence, durability and partitions, and the role's
-- privileges on it.

-- name: Relkind :one
-- The kind of the relation @table (quoted, optionally schema-qualified)
-- as text: 'r' for a plain table, 'p' for a partitioned one; no row when
-- it does not exist (to_regclass gives NULL rather than an error).
-- MigrateWith reads it before migrating with TimePartitioned: migrate does
-- not convert an existing plain table.
SELECT relkind::text FROM pg_class WHERE oid = to_regclass(@table)

-- name: ForeignTable :one
-- Whether the table @table (quoted, optionally schema-qualified) exists
-- without the outbox's aggregate_id column: a table the migrations did
-- not create (e.g. Debezium's, adopted or not), on which migration 00001
-- would fail half-way. MigrateWith refuses it before changing anything.
SELECT EXISTS (
  SELECT 1 FROM pg_class c
  WHERE c.oid = to_regclass(@table)
    AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'aggregate_id' AND a.attnum > 0 AND NOT a.attisdropped)
)

-- name: MissingColumns :one
-- The names among @columns (text[]) that the table @table (quoted) has
-- no column of, in their order: adopt refuses a table lacking a column
-- its flags name before it changes anything.
SELECT coalesce(array_agg(u.c ORDER BY u.o), '{}')
FROM unnest(@columns::text[]) WITH ORDINALITY AS u(c, o)
WHERE NOT EXISTS (
  SELECT 1 FROM pg_attribute a
  WHERE a.attrelid = @table::regclass AND a.attname = u.c AND a.attnum > 0 AND NOT a.attisdropped
)

-- name: SchemaExists :one
-- Whether the schema @schema exists: MigrateTable names a missing schema
-- of a qualified table (MissingSchemaError) instead of failing in the
-- middle of the first migration.
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = @schema)

-- name: CurrentSchema :one
-- The schema unqualified objects are created in (NULL when no schema of
-- the search_path exists) and the search_path: an unqualified table goes
-- there, and MissingSchemaError names the search_path when it is NULL.
SELECT current_schema(), current_setting('search_path')

-- name: TableSchema :one
-- The schema of the table @table (quoted), wherever the search_path found
-- it: its time partitions and adopt's row-check function go there.
SELECT n.nspname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace WHERE c.oid = @table::regclass

-- name: IsPartitioned :one
-- Whether the table @table (quoted) is partitioned (PARTITION BY): the
-- backfill then names rows by partition and ctid
-- (BackfillKeyPartitionsPartitioned).
SELECT relkind = 'p' FROM pg_class WHERE oid = @table::regclass

-- name: PartitionedByCreatedAt :one
-- Whether the table @table (quoted) is partitioned by RANGE (created_at)
-- and by nothing else: the time partitioning MigrateWith records and
-- keeps (migration 00011) needs that partition key.
SELECT EXISTS (SELECT 1 FROM pg_partitioned_table p JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
  WHERE p.partrelid = @table::regclass AND p.partstrat = 'r' AND p.partnatts = 1 AND a.attname = 'created_at')

-- name: HasDefaultPartition :one
-- Whether the partitioned table @table (quoted) has a DEFAULT partition,
-- which takes the rows no time partition covers.
SELECT partdefid <> 0 FROM pg_partitioned_table WHERE partrelid = @table::regclass

-- name: ChildPartitions :many
-- The names (unqualified) of the partitions of the table @table (quoted),
-- one level down: CreateTimePartitions skips those that exist.
SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = @table::regclass

-- name: EventTypeColumn :one
-- The event type column Adopt finds in the table @table (quoted):
-- "event_type" if it has one (it sorts first), else "type" (Debezium's);
-- NULL with neither, and Adopt then leaves out the event type's rule.
SELECT (array_agg(attname::text ORDER BY attname::text))[1] FROM pg_attribute
WHERE attrelid = @table::regclass AND attname IN ('event_type', 'type') AND attnum > 0 AND NOT attisdropped

-- name: ColumnCompression :one
-- Whether the server has pg_column_compression (PostgreSQL 14+), which
-- the insert trigger's payload size needs (PayloadSizeCompressed;
-- PayloadSize without it).
SELECT current_setting('server_version_num')::integer >= 140000

-- name: AdoptTableShape :one
-- What adopt's statements depend on in the table @table (quoted): whether
-- it is partitioned (its storage parameters then go to its partitions,
-- and seq cannot be an identity column) and whether it has a seq column
-- already. A table that does not exist is false, false: adopt's own
-- statements then say so.
SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(@table)), false),
  EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(@table) AND attname = 'seq' AND NOT attisdropped)

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
SELECT c.oid IS NOT NULL, coalesce(c.relpersistence = 'u', false), s.oid::regclass::text, s.relpersistence = 'u',
  (/* TEMPLATE: unlogged_partition */)
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
SELECT c.relpersistence = 'u', (/* TEMPLATE: seq_of */)::regclass::text, (/* TEMPLATE: unlogged_partition */), c.relkind = 'p',
  (SELECT count(*) FROM pg_partition_tree(c.oid) pt WHERE c.relkind = 'p' AND pt.isleaf)
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
SELECT current_user::text,
  has_table_privilege(c.oid, 'SELECT'), has_table_privilege(c.oid, 'UPDATE'), has_table_privilege(c.oid, 'DELETE'),
  has_table_privilege(g.oid, 'SELECT'), has_table_privilege(g.oid, 'INSERT'), has_table_privilege(g.oid, 'UPDATE'), has_table_privilege(g.oid, 'DELETE'),
  s.oid::regclass::text, has_sequence_privilege(s.oid, 'SELECT') OR has_sequence_privilege(s.oid, 'USAGE'),
  pg_has_role('pg_read_all_stats', 'USAGE'),
  has_table_privilege(m.oid, 'SELECT'), has_table_privilege(m.oid, 'UPDATE'),
  has_table_privilege(r.oid, 'SELECT'), has_table_privilege(r.oid, 'INSERT'), has_table_privilege(r.oid, 'UPDATE'), has_table_privilege(r.oid, 'DELETE'),
  has_table_privilege(p.oid, 'SELECT'), has_table_privilege(p.oid, 'UPDATE'),
  (SELECT pg_has_role(k.relowner, 'USAGE') FROM pg_class k WHERE k.oid = c.oid AND k.relkind = 'p'),
  (SELECT has_schema_privilege(k.relnamespace, 'CREATE') FROM pg_class k WHERE k.oid = c.oid AND k.relkind = 'p'),
  (SELECT pg_get_userbyid(k.relowner)::text FROM pg_class k WHERE k.oid = c.oid)
FROM (SELECT to_regclass(@table) AS oid) c, (SELECT to_regclass(@guard) AS oid) g,
  (SELECT to_regclass(@partitioning) AS oid) m, (SELECT to_regclass(@relays) AS oid) r, (SELECT to_regclass(@partitions) AS oid) p,
  LATERAL (SELECT (/* TEMPLATE: seq_of */) AS oid) s

-- name: Now :one
-- The database's clock: EnsureTimePartitions creates the partitions
-- around the database's now(), which created_at defaults to, not the
-- process's.
SELECT now()
