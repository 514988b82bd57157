-- Whether the table @table (quoted) is partitioned (PARTITION BY): the
-- backfill then names rows by partition and ctid
-- (backfill_key_partitions_partitioned.sql).
SELECT relkind = 'p' FROM pg_class WHERE oid = @table::regclass
