-- Serializes the creation and the dropping of the table's time partitions
-- (the slot: sqlname.XactLock of sqlname.LockTimePartitions on the table,
-- a transaction-level advisory lock, the one sql.CreateTimePartitions
-- takes too), so that several relays keeping them do not collide.
SELECT /* TEMPLATE: time_partitions_lock */
