-- The storage parameters the migrations give the outbox table (storage:
-- PartitionStorage), for an adopted plain table. Set before the seq
-- column is added: that rewrites the table, and the rewrite packs the
-- backlog by this fillfactor. A partitioned table has no storage and
-- refuses them: set_partition_storage.sql.
ALTER TABLE /* TEMPLATE: table */ SET (/* TEMPLATE: storage */)
