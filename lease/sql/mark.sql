-- Marks rows published: ends their lease for good.
--
-- Rows are named by seq (@seqs), whatever the type of the event ID column
-- (uuid, text, bigint): bigint[] travels in every pgx query exec mode, and
-- only the rows still held by claim token @token are touched. The CTE
-- finds them ordered by seq, which (with enable_sort off,
-- plan_settings.sql) only outbox_unpublished_seq_idx can produce, probed
-- with seq = ANY(...); the UPDATE then takes them by ctid (on a
-- partitioned table each partition's own index is probed, merged by seq,
-- and rows are named by tableoid and ctid: sqlname.RowAddress).
--
-- Not FOR UPDATE: a row lock is a WAL record of its own, and a row
-- updated by another transaction in between (only another relay's
-- takeover, after this lease ended: this relay's own settle statements
-- name disjoint rows) fails the ctid recheck and is left alone, as it
-- must be. Written as a plain `UPDATE ... WHERE seq = ANY(...)`, the
-- planner, misled by the partial indexes' live-row counts, may choose a
-- full scan of outbox_unpublished_aggregate_idx with a filter, which is
-- slow while a long transaction keeps VACUUM from removing its dead
-- entries.
WITH settled AS (
  SELECT /* TEMPLATE: row_address */ FROM /* TEMPLATE: table */
  WHERE seq = ANY(@seqs::bigint[]) AND claim_token = @token::uuid AND published_at IS NULL
  ORDER BY seq
)
UPDATE /* TEMPLATE: table */ SET published_at = now(), locked_until = NULL, last_error = NULL
/* TEMPLATE: match_settled */
