-- The database's clock: EnsureTimePartitions creates the partitions
-- around the database's now(), which created_at defaults to, not the
-- process's.
SELECT now()
