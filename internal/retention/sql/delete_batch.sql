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
