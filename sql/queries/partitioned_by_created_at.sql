-- Whether the table @table (quoted) is partitioned by RANGE (created_at)
-- and by nothing else: the time partitioning MigrateWith records and
-- keeps (migration 00011) needs that partition key.
SELECT EXISTS (SELECT 1 FROM pg_partitioned_table p JOIN pg_attribute a ON a.attrelid = p.partrelid AND a.attnum = p.partattrs[0]
  WHERE p.partrelid = @table::regclass AND p.partstrat = 'r' AND p.partnatts = 1 AND a.attname = 'created_at')
