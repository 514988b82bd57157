-- Records a table's time partitioning in <table>_partitioning
-- (MigrateOptions.TimePartitioned): the interval, @interval_seconds, only
-- if none is recorded yet (it is fixed when the table is created), and
-- the partitions kept ahead, @ahead, only if the interval recorded is
-- that one (giving TimePartitionsAhead again changes it). Returns the
-- interval recorded, in seconds: one other than @interval_seconds is the
-- caller's error.
UPDATE /* TEMPLATE: partitioning */ SET time_partition_interval = coalesce(time_partition_interval, @interval_seconds * interval '1 second'), time_partitions_ahead = CASE WHEN time_partition_interval IS NULL OR time_partition_interval = @interval_seconds * interval '1 second' THEN @ahead ELSE time_partitions_ahead END
RETURNING extract(epoch FROM time_partition_interval)::bigint
