-- The names (unqualified) of the partitions of the table @table (quoted),
-- one level down: CreateTimePartitions skips those that exist.
SELECT c.relname::text FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid WHERE i.inhparent = @table::regclass
