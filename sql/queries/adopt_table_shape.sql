-- What adopt's statements depend on in the table @table (quoted): whether
-- it is partitioned (its storage parameters then go to its partitions,
-- and seq cannot be an identity column) and whether it has a seq column
-- already. A table that does not exist is false, false: adopt's own
-- statements then say so.
SELECT coalesce((SELECT relkind = 'p' FROM pg_class WHERE oid = to_regclass(@table)), false),
  EXISTS (SELECT 1 FROM pg_attribute WHERE attrelid = to_regclass(@table) AND attname = 'seq' AND NOT attisdropped)
