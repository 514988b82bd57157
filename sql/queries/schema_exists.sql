-- Whether the schema @schema exists: MigrateTable names a missing schema
-- of a qualified table (MissingSchemaError) instead of failing in the
-- middle of the first migration.
SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = @schema)
