-- What Inspect reads of the table @table (quoted) from the catalog:
-- whether it is unlogged, its seq sequence (seq_of.sql), its first
-- unlogged partition (unlogged_partition.sql), whether it is partitioned
-- and then how many leaf partitions it has. A missing table is an error.
SELECT c.relpersistence = 'u', (/* TEMPLATE: seq_of */)::regclass::text, (/* TEMPLATE: unlogged_partition */), c.relkind = 'p',
  (SELECT count(*) FROM pg_partition_tree(c.oid) pt WHERE c.relkind = 'p' AND pt.isleaf)
FROM pg_class c WHERE c.oid = @table::regclass
