-- The status command's statements.

-- name: StatusCounts :one
-- The status command's counts (statusReport), read in one repeatable-read
-- snapshot with the other status statements: the database's now(), the
-- unpublished rows that are not dead-lettered and how many of them are in
-- each state (claimable, held back, leased, backing off), the dead
-- letters (and of them, the schema faults), and the published rows kept, with their oldest and newest
-- published_at.
--
-- The states are the claim's own predicates (state_o: lease.States.State
-- on alias o), so that status, the gauges and the claim never disagree.
-- The unpublished rows are read through the partial index of unpublished
-- rows, with one probe of the aggregate index per row for the held-back
-- check; the published count and range use outbox_published_at_idx (an
-- index-only scan; on a large table of kept history the count takes a
-- moment).
--
-- Slots: table; state_o; dead_lettered, claimable, held, leased and
-- backing_off, the state names (lease.State*) as string literals.
WITH u AS (
  SELECT /* TEMPLATE: state_o */ AS state, o.last_error LIKE 'event does not fit its schema:%' AS schema_fault
  FROM /* TEMPLATE: table */ o WHERE o.published_at IS NULL
)
SELECT
  now() AS checked_at,
  (SELECT count(*) FROM u WHERE state <> /* TEMPLATE: dead_lettered */) AS unpublished,
  (SELECT count(*) FROM u WHERE state = /* TEMPLATE: claimable */) AS claimable,
  (SELECT count(*) FROM u WHERE state = /* TEMPLATE: held */) AS held,
  (SELECT count(*) FROM u WHERE state = /* TEMPLATE: leased */) AS leased,
  (SELECT count(*) FROM u WHERE state = /* TEMPLATE: backing_off */) AS backing_off,
  (SELECT count(*) FROM u WHERE state = /* TEMPLATE: dead_lettered */) AS dead_letters,
  -- Of them, those whose payload did not fit its Schema Registry schema
  -- (last_error starts with serde.ErrSchema's text).
  (SELECT count(*) FROM u WHERE state = /* TEMPLATE: dead_lettered */ AND schema_fault) AS dead_letters_schema,
  (SELECT count(*) FROM /* TEMPLATE: table */ WHERE published_at IS NOT NULL) AS published,
  (SELECT min(published_at) FROM /* TEMPLATE: table */ WHERE published_at IS NOT NULL) AS oldest_published_at,
  (SELECT max(published_at) FROM /* TEMPLATE: table */ WHERE published_at IS NOT NULL) AS newest_published_at

-- name: OldestUnpublished :one
-- The status command's oldest unpublished event: the lowest-seq
-- unpublished row that is not dead-lettered, with its created_at, its ID
-- (the id slot: the configured ID column) as text and its age in seconds
-- by the database clock. No row when every event is published or
-- dead-lettered.
--
-- A created_at of ±infinity (plain SQL can write it; the relay
-- dead-letters such a row) reads as NULL: no age.
SELECT CASE WHEN isfinite(created_at) THEN created_at END AS created_at, /* TEMPLATE: id */::text AS event_id,
  CASE WHEN isfinite(created_at) THEN extract(epoch FROM now() - created_at)::float8 END AS age_seconds FROM /* TEMPLATE: table */
WHERE published_at IS NULL AND dead_lettered_at IS NULL ORDER BY seq LIMIT 1

-- name: RelayLeases :many
-- The status command's relays holding leases: each relay (locked_by)
-- holding unpublished rows whose lease has not ended, how many, and when
-- the last of those leases ends. A row backing off (locked_by NULL) is no
-- relay's. Read by column name into relayLeases.
SELECT locked_by AS relay_id, count(*) AS leased, max(locked_until) AS lease_ends_at FROM /* TEMPLATE: table */
WHERE published_at IS NULL AND locked_until > now() AND locked_by IS NOT NULL
GROUP BY locked_by ORDER BY locked_by
