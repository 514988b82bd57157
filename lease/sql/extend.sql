-- Renews the lease of rows still held by claim token @token to
-- @lease_ms milliseconds from now, and returns the seqs it renewed with
-- the lease each got. An extension, like a claim, never outlives the
-- membership of the relay (@member), and only rows of partitions it still
-- owns are extended. The rows are found and updated as by mark.sql (see
-- there why so).
WITH me AS MATERIALIZED (
  SELECT r.until FROM /* TEMPLATE: relays */ r WHERE r.member = @member AND r.until > now()
), settled AS (
  SELECT /* TEMPLATE: row_address_o */ FROM /* TEMPLATE: table */ o
  WHERE o.seq = ANY(@seqs::bigint[]) AND o.claim_token = @token::uuid AND o.published_at IS NULL
    AND /* TEMPLATE: key_partition_o */ IN (SELECT p.partition FROM /* TEMPLATE: partitions */ p WHERE p.owner = @member)
    AND EXISTS (SELECT 1 FROM me)
  ORDER BY o.seq
)
UPDATE /* TEMPLATE: table */ o SET locked_until = least(now() + @lease_ms * interval '1 millisecond', (SELECT until FROM me))
/* TEMPLATE: match_settled_o */
RETURNING o.seq, (extract(epoch FROM o.locked_until - now()) * 1000)::bigint
