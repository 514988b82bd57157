-- The gauges' statements, read at each refresh.

-- name: SessionSettings :exec
-- Opens the statement batches of the table gauges (TableStats) and
-- of the table check (TableCheck), for their own transaction.
--
-- The index plans whatever the table's statistics say, as lease's plan
-- settings (lease/sql/claim.sql, PlanSettings) do for the claim: a generic plan
-- made on an empty table scans the whole table. And a statement_timeout
-- of Config.QueryTimeout (the slot: milliseconds, as a string literal), so
-- that a database's shorter statement_timeout does not make a large
-- backlog's count fail at every refresh (and the gauges stay stale) while
-- the relay's own bound still holds.
SELECT set_config('enable_seqscan', 'off', true), set_config('enable_sort', 'off', true), set_config('jit', 'off', true), set_config('statement_timeout', /* TEMPLATE: statement_timeout */, true)

-- name: TableStats :one
-- The table gauges (Metrics.Refresh): the lowest-seq live rows, the
-- lowest-seq claimable row, and the counts (Counts), or NULLs instead
-- of the counts for an early refresh (NoCounts).
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
SELECT extract(epoch FROM now())::float8 AS db_now,
  coalesce((SELECT array_agg(seq ORDER BY seq) FROM head), '{}') AS head_seqs,
  coalesce((SELECT array_agg(created ORDER BY seq) FROM head), '{}') AS head_created,
  (SELECT seq FROM claimable) AS claimable_seq, (SELECT created FROM claimable) AS claimable_created,
  /* TEMPLATE: counts */

-- name: Counts :fragment
-- A fragment of TableStats (its last two columns), not a statement:
-- the unpublished rows that are not dead-lettered (lease.States.Live, the
-- live_o slot), and the dead letters.
--
-- The counts are the refresh's only statements whose cost grows with the
-- backlog (a scan of the unpublished index): they are read every
-- Config.Interval, not at the early refreshes a relay asks for while it
-- publishes a backlog (oldest.go), which read NoCounts instead.
(SELECT count(*) FROM /* TEMPLATE: table */ o WHERE /* TEMPLATE: live_o */) AS unpublished,
  (SELECT count(*) FROM /* TEMPLATE: table */ WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL) AS dead_letters

-- name: NoCounts :fragment
-- A fragment of TableStats (its last two columns), not a statement:
-- what an early refresh reads instead of the counts (Counts), whose
-- scan grows with the backlog. The count gauges keep their last values.
NULL::bigint AS unpublished, NULL::bigint AS dead_letters

-- name: OwnedClaimable :one
-- The age of the oldest claimable row (lease.States.Claimable, the
-- claimable_o slot) of the key partitions member @member owns:
-- outbox_relay_oldest_claimable_age_seconds, read in the refresh's batch
-- while a relay is attached.
--
-- mask is the ownership of every key partition, indexed by partition as
-- the claim's own mask is (lease's claimArgs.Owned): a row counts when its
-- key partition is this member's. That is key_partition, or for a row
-- whose key_partition is NULL (written before migration 00009 and not
-- backfilled yet) the table's _key_partition function of its aggregate
-- ID, as in the claim (lease's key_partition_o slot).
WITH mask AS (
  SELECT array_agg(p.owner IS NOT DISTINCT FROM @member ORDER BY p.partition) AS m FROM /* TEMPLATE: partitions */ p
)
SELECT extract(epoch FROM now() - o.created_at)::float8 FROM /* TEMPLATE: table */ o
WHERE /* TEMPLATE: claimable_o */
  AND (SELECT m FROM mask)[coalesce(o.key_partition, /* TEMPLATE: key_partition */(o./* TEMPLATE: aggregate_id */::text)) + 1]
ORDER BY o.seq LIMIT 1

-- name: MaxSeq :one
-- The table's highest seq, for the fix a sequence behind the table's seqs
-- needs (sqladmin.SequenceBehindError: setval to at least this). One scan
-- of the table, read once per episode, when the table check first finds
-- the sequence behind.
SELECT max(seq) FROM /* TEMPLATE: table */
