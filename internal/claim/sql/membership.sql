-- Ownership of key partitions: the relays' membership and the moves of
-- partitions between them.

-- name: Join :one
-- The heartbeat of member @member (of relay @relay_id): members whose
-- until has passed are removed (their partitions are free), this one
-- joins or renews its until to @lease_ms milliseconds from now, and a
-- join or a removal bumps the generation so that every relay rebalances.
-- Returns the table's number of key partitions, the generation, and
-- whether the key partitions' backfill has finished.
WITH expired AS (
  DELETE FROM /* TEMPLATE: relays */ WHERE until <= now() AND member <> @member RETURNING member
), me AS (
  INSERT INTO /* TEMPLATE: relays */ (member, relay_id, until) VALUES (@member, @relay_id, now() + @lease_ms * interval '1 millisecond')
  ON CONFLICT (member) DO UPDATE SET until = EXCLUDED.until, renewed_at = now()
  RETURNING (xmax = 0) AS joined
), bump AS (
  UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM expired) OR (SELECT joined FROM me)
  RETURNING generation
)
SELECT m.partitions, coalesce((SELECT generation FROM bump), m.generation) AS generation, m.backfilled_at IS NOT NULL AS backfilled
FROM /* TEMPLATE: partitioning */ m

-- name: Members :many
-- The live members, which Assign shares the key partitions among.
SELECT member FROM /* TEMPLATE: relays */ WHERE until > now() ORDER BY member

-- name: Owners :many
-- The owner of each key partition ('' for nobody), in partition order.
SELECT partition, coalesce(owner, '') AS owner FROM /* TEMPLATE: partitions */ ORDER BY partition

-- name: Move :one
-- Acquires for member @member the free partitions among @acquire
-- assigned to it (no owner, or an owner that is no live member), gives
-- back those of @release it owns, and bumps the generation if anything
-- changed hands. Returns the partitions acquired, those given back, and
-- the new generation (NULL when nothing moved).
WITH acquired AS (
  UPDATE /* TEMPLATE: partitions */ p SET owner = @member, epoch = p.epoch + 1, since = now(),
    handovers = p.handovers + CASE WHEN p.owner IS NULL THEN 0 ELSE 1 END
  WHERE p.partition = ANY(@acquire::int[])
    AND (p.owner IS NULL OR NOT EXISTS (SELECT 1 FROM /* TEMPLATE: relays */ r WHERE r.member = p.owner AND r.until > now()))
  RETURNING p.partition
), released AS (
  UPDATE /* TEMPLATE: partitions */ p SET owner = NULL, since = now()
  WHERE p.partition = ANY(@release::int[]) AND p.owner = @member
  RETURNING p.partition
), bump AS (
  UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM acquired) OR EXISTS (SELECT 1 FROM released)
  RETURNING generation
)
SELECT coalesce((SELECT array_agg(partition) FROM acquired), '{}') AS acquired,
       coalesce((SELECT array_agg(partition) FROM released), '{}') AS released,
       (SELECT generation FROM bump) AS generation

-- name: Leave :one
-- Member @member leaves: it gives back every partition it owns but those
-- still busy (@keep), removes itself when @gone (nothing is kept), and
-- bumps the generation if either happened, so that the other relays take
-- its partitions at once.
WITH released AS (
  UPDATE /* TEMPLATE: partitions */ SET owner = NULL, since = now() WHERE owner = @member AND NOT (partition = ANY(@keep::int[])) RETURNING partition
), gone AS (
  DELETE FROM /* TEMPLATE: relays */ WHERE member = @member AND @gone RETURNING member
)
UPDATE /* TEMPLATE: partitioning */ SET generation = generation + 1
WHERE EXISTS (SELECT 1 FROM released) OR EXISTS (SELECT 1 FROM gone)
