-- Creates the DEFAULT partition of a time-partitioned outbox table
-- (DefaultPartitionName, in the table's schema), for the rows no time
-- partition covers, with the storage parameters every partition gets
-- (storage: PartitionStorage), which the partitioned table itself has no
-- storage for.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: partition */ PARTITION OF /* TEMPLATE: table */ DEFAULT WITH (/* TEMPLATE: storage */)
