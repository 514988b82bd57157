-- What ends or changes a lease: marking rows published, extending,
-- releasing and dead-lettering them, and requeueing dead letters.

-- name: Mark :execrows
-- Marks rows published: ends their lease for good.
--
-- Rows are named by seq (@seqs), whatever the type of the event ID column
-- (uuid, text, bigint): bigint[] travels in every pgx query exec mode, and
-- only the rows still held by claim token @token are touched. The CTE
-- finds them ordered by seq, which (with enable_sort off,
-- PlanSettings) only outbox_unpublished_seq_idx can produce, probed
-- with seq = ANY(...); the UPDATE then takes them by ctid (on a
-- partitioned table the index of each partition in @created_from ..
-- @created_to, the claim's created_at range, is probed, merged by seq,
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
    /* TEMPLATE: created_bound */
  ORDER BY seq
)
UPDATE /* TEMPLATE: table */ SET published_at = now(), locked_until = NULL, last_error = NULL
/* TEMPLATE: match_settled */

-- name: Extend :many
-- Renews the lease of rows still held by claim token @token to
-- @lease_ms milliseconds from now, and returns the seqs it renewed with
-- the lease each got. An extension, like a claim, never outlives the
-- membership of the relay (@member; a static member's incarnation
-- @started, see Claim), and only rows of partitions it still owns are
-- extended. The rows are found and updated as by Mark (see
-- there why so).
WITH me AS MATERIALIZED (
  SELECT r.until FROM /* TEMPLATE: relays */ r WHERE r.member = @member AND r.until > now()
    AND (@started::timestamptz IS NULL OR r.started_at = @started::timestamptz)
), settled AS (
  SELECT /* TEMPLATE: row_address_o */ FROM /* TEMPLATE: table */ o
  WHERE o.seq = ANY(@seqs::bigint[]) AND o.claim_token = @token::uuid AND o.published_at IS NULL
    AND /* TEMPLATE: key_partition_o */ IN (SELECT p.partition FROM /* TEMPLATE: partitions */ p WHERE p.owner = @member)
    AND EXISTS (SELECT 1 FROM me)
  ORDER BY o.seq
)
UPDATE /* TEMPLATE: table */ o SET locked_until = least(now() + @lease_ms * interval '1 millisecond', (SELECT until FROM me))
/* TEMPLATE: match_settled_o */
RETURNING o.seq, (extract(epoch FROM o.locked_until - now()) * 1000)::bigint AS lease_ms

-- name: Release :execrows
-- Gives rows back: claimable again once @retry_ms milliseconds have
-- passed (at once when 0), attempts grown by @attempt_inc, and last_error
-- replaced by @last_error unless NULL.
--
-- The rows (@seqs, still held by claim token @token) are found and
-- updated as by Mark: see there why so.
WITH settled AS (
  SELECT /* TEMPLATE: row_address */ FROM /* TEMPLATE: table */
  WHERE seq = ANY(@seqs::bigint[]) AND claim_token = @token::uuid AND published_at IS NULL
  ORDER BY seq
)
UPDATE /* TEMPLATE: table */ SET locked_until = CASE WHEN @retry_ms::bigint > 0 THEN now() + @retry_ms::bigint * interval '1 millisecond' END,
    locked_by = NULL, claim_token = NULL,
    attempts = attempts + @attempt_inc::int, last_error = COALESCE(@last_error::text, last_error)
/* TEMPLATE: match_settled */

-- name: DeadLetter :execrows
-- Parks rows as dead letters: attempts grown by @attempt_inc, last_error
-- set to @last_error, and with @hold their locked_until 'infinity', which
-- holds back every later event of their aggregates until a requeue.
--
-- The rows (@seqs, still held by claim token @token) are found and
-- updated as by Mark: see there why so.
WITH settled AS (
  SELECT /* TEMPLATE: row_address */ FROM /* TEMPLATE: table */
  WHERE seq = ANY(@seqs::bigint[]) AND claim_token = @token::uuid AND published_at IS NULL
  ORDER BY seq
)
UPDATE /* TEMPLATE: table */ SET dead_lettered_at = now(),
    locked_until = CASE WHEN @hold::bool THEN 'infinity'::timestamptz END,
    locked_by = NULL, claim_token = NULL,
    attempts = attempts + @attempt_inc::int, last_error = @last_error::text
/* TEMPLATE: match_settled */

-- name: Requeue :execrows
-- Makes dead letters claimable again with attempts reset to 0 (last_error
-- is kept for the record): the events whose ID, as text, is one of @ids,
-- or every dead letter when @ids is NULL. Rows are named by event ID, not
-- by row address, so this statement is the same on a partitioned table.
UPDATE /* TEMPLATE: table */
SET dead_lettered_at = NULL, locked_until = NULL, attempts = 0
WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL AND (@ids::text[] IS NULL OR /* TEMPLATE: id */::text = ANY(@ids::text[]))
