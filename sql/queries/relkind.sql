-- The kind of the relation @table (quoted, optionally schema-qualified)
-- as text: 'r' for a plain table, 'p' for a partitioned one; no row when
-- it does not exist (to_regclass gives NULL rather than an error).
-- MigrateWith reads it before migrating with TimePartitioned: migrate does
-- not convert an existing plain table.
SELECT relkind::text FROM pg_class WHERE oid = to_regclass(@table)
