-- set_storage.sql for an adopted partitioned table, which has no storage
-- and refuses them: the storage parameters (storage_literal:
-- PartitionStorage as a literal) go to each of its leaf partitions, at
-- every level (table_literal: the quoted table as a literal); partitions
-- created later need them too (PartitionStorage).
DO $adopt$ DECLARE p regclass; BEGIN
  FOR p IN SELECT relid FROM pg_partition_tree(/* TEMPLATE: table_literal */::regclass) WHERE isleaf AND level > 0 LOOP
    EXECUTE format('ALTER TABLE %s SET (%s)', p, /* TEMPLATE: storage_literal */);
  END LOOP;
END $adopt$
