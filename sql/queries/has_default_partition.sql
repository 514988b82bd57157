-- Whether the partitioned table @table (quoted) has a DEFAULT partition,
-- which takes the rows no time partition covers.
SELECT partdefid <> 0 FROM pg_partitioned_table WHERE partrelid = @table::regclass
