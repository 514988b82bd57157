-- backfill_key_partitions.sql on a partitioned table: there a ctid names
-- a row only within its partition, so rows are named by partition
-- (tableoid) and ctid, and created_at (the partition key of a
-- time-partitioned table) lets the executor look in the row's partition
-- alone.
WITH batch AS (
  SELECT tableoid, ctid, created_at, seq FROM /* TEMPLATE: table */ WHERE published_at IS NULL AND seq > @after ORDER BY seq LIMIT /* TEMPLATE: batch_size */
), filled AS (
  UPDATE /* TEMPLATE: table */ o SET key_partition = /* TEMPLATE: key_partition_fn */(o./* TEMPLATE: aggregate */::text)
  FROM batch b WHERE o.tableoid = b.tableoid AND o.ctid = b.ctid AND o.created_at = b.created_at AND o.key_partition IS NULL
)
SELECT max(seq) FROM batch
