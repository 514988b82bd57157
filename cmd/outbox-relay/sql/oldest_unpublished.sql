-- The status command's oldest unpublished event: the lowest-seq
-- unpublished row that is not dead-lettered, with its created_at, its ID
-- (the id slot: the configured ID column) as text and its age in seconds
-- by the database clock. No row when every event is published or
-- dead-lettered.
--
-- A created_at of ±infinity (plain SQL can write it; the relay
-- dead-letters such a row) reads as NULL: no age.
SELECT CASE WHEN isfinite(created_at) THEN created_at END, /* TEMPLATE: id */::text,
  CASE WHEN isfinite(created_at) THEN extract(epoch FROM now() - created_at)::float8 END FROM /* TEMPLATE: table */
WHERE published_at IS NULL AND dead_lettered_at IS NULL ORDER BY seq LIMIT 1
