-- The persistence of the table @table (quoted) and of its seq sequence,
-- from the catalog alone (no row of the table is read), for
-- CheckDurability: whether the table exists, whether it is unlogged, its
-- sequence as regclass prints it (NULL without one) and whether that is
-- unlogged, and on a partitioned table its first unlogged partition
-- (unlogged_partition.sql). A table that does not exist is one row of
-- NULLs and false, not an error: Migrate creates it logged.
SELECT c.oid IS NOT NULL, coalesce(c.relpersistence = 'u', false), s.oid::regclass::text, s.relpersistence = 'u',
  (/* TEMPLATE: unlogged_partition */)
FROM (SELECT to_regclass(@table) AS oid) r
LEFT JOIN pg_class c ON c.oid = r.oid
LEFT JOIN pg_class s ON s.oid = (/* TEMPLATE: seq_of */)
