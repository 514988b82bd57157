-- Gives rows back: claimable again once @retry_ms milliseconds have
-- passed (at once when 0), attempts grown by @attempt_inc, and last_error
-- replaced by @last_error unless NULL.
--
-- The rows (@seqs, still held by claim token @token) are found and
-- updated as by mark.sql: see there why so.
WITH settled AS (
  SELECT /* TEMPLATE: row_address */ FROM /* TEMPLATE: table */
  WHERE seq = ANY(@seqs::bigint[]) AND claim_token = @token::uuid AND published_at IS NULL
  ORDER BY seq
)
UPDATE /* TEMPLATE: table */ SET locked_until = CASE WHEN @retry_ms::bigint > 0 THEN now() + @retry_ms::bigint * interval '1 millisecond' END,
    locked_by = NULL, claim_token = NULL,
    attempts = attempts + @attempt_inc::int, last_error = COALESCE(@last_error::text, last_error)
/* TEMPLATE: match_settled */
