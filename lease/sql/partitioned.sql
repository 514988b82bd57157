-- Whether the outbox table (@table, quoted and schema-qualified) is
-- partitioned (PARTITION BY), which decides how the statements that
-- update rows they selected name them (the row_address slots).
SELECT relkind = 'p' FROM pg_class WHERE oid = @table::regclass
