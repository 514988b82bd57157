-- Whether the partition (the partition slot, quoted as regclass prints
-- it) may be dropped: every row in it is published (so none is a dead
-- letter either: a dead letter is never published), the last of them
-- more than @retention_us microseconds (Config.Retention) ago by the
-- database clock. An empty partition may be dropped.
SELECT NOT EXISTS (SELECT 1 FROM /* TEMPLATE: partition */ WHERE published_at IS NULL)
  AND coalesce((SELECT max(published_at) FROM /* TEMPLATE: partition */), '-infinity') < now() - @retention_us * interval '1 microsecond'
