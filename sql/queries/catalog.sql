-- What the package reads of the table from the catalogs: its kind,
-- columns, schema and partitioning (internal/sqladmin reads the rest).

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
