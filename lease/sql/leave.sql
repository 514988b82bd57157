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
