-- Parks rows as dead letters: attempts grown by @attempt_inc, last_error
-- set to @last_error, and with @hold their locked_until 'infinity', which
-- holds back every later event of their aggregates until a requeue.
--
-- The rows (@seqs, still held by claim token @token) are found and
-- updated as by mark.sql: see there why so.
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
