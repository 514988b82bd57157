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
SELECT coalesce((SELECT array_agg(partition) FROM acquired), '{}'),
       coalesce((SELECT array_agg(partition) FROM released), '{}'),
       (SELECT generation FROM bump)
