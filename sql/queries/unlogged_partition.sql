-- A fragment, not a statement: the first unlogged partition, at any
-- level, of the table c, as regclass prints it; NULL when it has none or
-- is not partitioned. A partitioned table's own relpersistence says
-- nothing about its partitions', and a crash empties an unlogged one.
SELECT min(u.oid::regclass::text) FROM pg_partition_tree(c.oid) pt JOIN pg_class u ON u.oid = pt.relid
  WHERE c.relkind = 'p' AND pt.level > 0 AND u.relpersistence = 'u'
