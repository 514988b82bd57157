-- One batch of a pass on a partitioned table: delete_batch.sql (see there
-- what it deletes and why so), but a ctid is unique only within a
-- partition, so rows are named by the partition (tableoid) and ctid
-- together.
DELETE FROM /* TEMPLATE: table */ o USING (
  SELECT tableoid, ctid FROM /* TEMPLATE: table */
  WHERE published_at < now() - @retention_us * interval '1 microsecond'
    AND dead_lettered_at IS NULL
  ORDER BY published_at
  LIMIT @batch_size
  FOR UPDATE SKIP LOCKED) d
WHERE o.tableoid = d.tableoid AND o.ctid = d.ctid
