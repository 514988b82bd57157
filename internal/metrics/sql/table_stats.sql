-- The table gauges (Metrics.Refresh): the lowest-seq live rows, the
-- lowest-seq claimable row, and the counts (counts.sql), or NULLs instead
-- of the counts for an early refresh (no_counts.sql).
--
-- Index scans only: the lowest-seq unpublished, live rows through
-- outbox_unpublished_seq_idx (LIMIT head_rows, metrics.headRows, skipping
-- dead letters: see oldest.go); the lowest-seq claimable row (the same,
-- stopping at the first row whose lease is free and that no earlier event
-- of its aggregate holds back, lease.States.Claimable, the claimable_o
-- slot: the rows in flight are passed by their lease alone, and one probe
-- of outbox_unpublished_aggregate_idx is made per lease-free row passed);
-- the unpublished rows through the seq index; the dead letters through
-- outbox_dead_letters_idx. Timestamps, not ages: the ages are computed
-- when scraped (see oldestSnapshot).
WITH head AS (
  SELECT o.seq, extract(epoch FROM o.created_at)::float8 AS created FROM /* TEMPLATE: table */ o
  WHERE /* TEMPLATE: live_o */ ORDER BY o.seq LIMIT /* TEMPLATE: head_rows */
), claimable AS (
  SELECT o.seq, extract(epoch FROM o.created_at)::float8 AS created FROM /* TEMPLATE: table */ o
  WHERE /* TEMPLATE: claimable_o */
  ORDER BY o.seq LIMIT 1
)
SELECT extract(epoch FROM now())::float8,
  coalesce((SELECT array_agg(seq ORDER BY seq) FROM head), '{}'),
  coalesce((SELECT array_agg(created ORDER BY seq) FROM head), '{}'),
  (SELECT seq FROM claimable), (SELECT created FROM claimable),
  /* TEMPLATE: counts */
