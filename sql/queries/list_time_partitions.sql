-- The leaf partitions of the table @table (quoted), for
-- ListTimePartitions: each as regclass prints it, whether it is unlogged,
-- whether it is the DEFAULT partition, and its range bounds of created_at
-- read from its partition bound (NULL for DEFAULT, MINVALUE and
-- MAXVALUE); in the order of their bounds, the DEFAULT partition last.
-- None for a plain table, whose tree is itself, at level 0.
SELECT c.oid::regclass::text, c.relpersistence = 'u', b.bound = 'DEFAULT',
  (regexp_match(b.bound, '^FOR VALUES FROM \(''([^'']*)''\)'))[1]::timestamptz,
  (regexp_match(b.bound, ' TO \(''([^'']*)''\)$'))[1]::timestamptz
FROM pg_partition_tree(@table::regclass) p
JOIN pg_class c ON c.oid = p.relid
CROSS JOIN LATERAL (SELECT pg_get_expr(c.relpartbound, c.oid) AS bound) b
WHERE p.isleaf AND p.level > 0
ORDER BY b.bound = 'DEFAULT', 4 NULLS FIRST, 1
