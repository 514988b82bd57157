-- Whether the table @table (quoted, optionally schema-qualified) exists
-- without the outbox's aggregate_id column: a table the migrations did
-- not create (e.g. Debezium's, adopted or not), on which migration 00001
-- would fail half-way. MigrateWith refuses it before changing anything.
SELECT EXISTS (
  SELECT 1 FROM pg_class c
  WHERE c.oid = to_regclass(@table)
    AND NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = c.oid AND a.attname = 'aggregate_id' AND a.attnum > 0 AND NOT a.attisdropped)
)
