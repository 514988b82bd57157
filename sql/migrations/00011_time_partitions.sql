-- +goose Up
-- A time-partitioned outbox table (`outbox-relay migrate --time-partitioned`):
-- the table is partitioned by RANGE (created_at), one partition per
-- time_partition_interval, aligned to multiples of it since the Unix epoch
-- (UTC), named <table>_pYYYYMMDD_HHMM after its start, plus a DEFAULT
-- partition <table>_default for rows whose created_at no partition covers
-- (so that such an INSERT never fails). The relay creates the partitions of
-- the coming time_partitions_ahead intervals (sql.EnsureTimePartitions), and
-- its retention can drop a whole old partition once every row in it is
-- published (retention.Config.DropPartitions) instead of deleting rows.
-- NULL: the table is not partitioned by pgoutbox (a plain table, or one
-- whose partitions its owner manages).
ALTER TABLE outbox_partitioning
    ADD COLUMN IF NOT EXISTS time_partition_interval interval,
    ADD COLUMN IF NOT EXISTS time_partitions_ahead integer;

-- +goose Down
ALTER TABLE outbox_partitioning
    DROP COLUMN IF EXISTS time_partition_interval,
    DROP COLUMN IF EXISTS time_partitions_ahead;
