-- After a requeue, shrinks the order guard's 'holds' entry to what still
-- backs off or is held: the latest locked_until of an unpublished row
-- that no relay leases.
UPDATE /* TEMPLATE: guard */ SET until = coalesce((
  SELECT max(locked_until) FROM /* TEMPLATE: table */
  WHERE published_at IS NULL AND locked_by IS NULL AND locked_until > now()), '-infinity')
WHERE key = 'holds'
