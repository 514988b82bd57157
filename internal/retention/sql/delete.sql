-- Deleting published rows in batches.

-- name: Partitioned :one
-- Read once, at the first pass: whether the outbox table (@table, quoted
-- and schema-qualified) is partitioned, and its DEFAULT partition (NULL
-- when it has none or is not partitioned), which decide the DELETE of a
-- batch (DeleteBatch, DeleteBatchPartitioned).
SELECT c.relkind = 'p', (SELECT d.oid::regclass::text FROM pg_partitioned_table pt JOIN pg_class d ON d.oid = pt.partdefid WHERE pt.partrelid = c.oid)
FROM pg_class c WHERE c.oid = @table::regclass

-- name: Cutoff :one
-- The retention's cutoff by the database clock: now() less @retention_us
-- microseconds (Config.Retention). A partition whose upper bound is after
-- it is not looked at.
SELECT now() - @retention_us * interval '1 microsecond'

-- name: DeleteBatch :execrows
-- One batch of a pass on a plain table (or on the DEFAULT partition of a
-- time-partitioned table whose other partitions are dropped whole): it
-- deletes at most @batch_size published rows whose published_at is more
-- than @retention_us microseconds (Config.Retention) ago, oldest first.
--
-- The subquery walks outbox_published_at_idx from its oldest entry and
-- row-locks at most @batch_size rows (skipping rows another cleaner
-- holds); the DELETE finds exactly those by ctid (a TID scan), which the
-- row lock keeps stable. `published_at < ...` excludes unpublished rows,
-- and so every dead letter (a dead letter is never published); the
-- explicit dead_lettered_at test keeps it that way should that ever
-- change.
DELETE FROM /* TEMPLATE: table */ WHERE ctid = ANY(ARRAY(
  SELECT ctid FROM /* TEMPLATE: table */
  WHERE published_at < now() - @retention_us * interval '1 microsecond'
    AND dead_lettered_at IS NULL
  ORDER BY published_at
  LIMIT @batch_size
  FOR UPDATE SKIP LOCKED))

-- name: DeleteBatchPartitioned :execrows
-- One batch of a pass on a partitioned table: DeleteBatch (see there
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
