-- A fragment of table_stats.sql (its last two columns), not a statement:
-- the unpublished rows that are not dead-lettered (lease.States.Live, the
-- live_o slot), and the dead letters.
--
-- The counts are the refresh's only statements whose cost grows with the
-- backlog (a scan of the unpublished index): they are read every
-- Config.Interval, not at the early refreshes a relay asks for while it
-- publishes a backlog (oldest.go), which read no_counts.sql instead.
(SELECT count(*) FROM /* TEMPLATE: table */ o WHERE /* TEMPLATE: live_o */),
  (SELECT count(*) FROM /* TEMPLATE: table */ WHERE dead_lettered_at IS NOT NULL AND published_at IS NULL)
