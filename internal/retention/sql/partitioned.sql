-- Read once, at the first pass: whether the outbox table (@table, quoted
-- and schema-qualified) is partitioned, and its DEFAULT partition (NULL
-- when it has none or is not partitioned), which decide the DELETE of a
-- batch (delete_batch.sql, delete_batch_partitioned.sql).
SELECT c.relkind = 'p', (SELECT d.oid::regclass::text FROM pg_partitioned_table pt JOIN pg_class d ON d.oid = pt.partdefid WHERE pt.partrelid = c.oid)
FROM pg_class c WHERE c.oid = @table::regclass
