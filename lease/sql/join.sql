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
SELECT m.partitions, coalesce((SELECT generation FROM bump), m.generation), m.backfilled_at IS NOT NULL
FROM /* TEMPLATE: partitioning */ m
