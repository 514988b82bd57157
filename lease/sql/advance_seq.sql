-- The floor (Claimer.advance) is a seq below which every row is
-- published; claims scan from there. Published rows leave the partial
-- indexes only when VACUUM cleans them (a large table's autovacuum may
-- skip index cleanup for a long time: PG 14+'s INDEX_CLEANUP auto bypass;
-- a transaction holding an old snapshot stops it altogether), so an index
-- scan from the start would walk over every published row's dead entry,
-- and each claim would get slower as events are published.
--
-- The floor moves only over published rows and over seqs that are final:
-- a marker records the sequence's last value (this statement) and then
-- the transactions holding a lock on the sequence (advance_vxid.sql), and
-- counts once they have all ended. The sequence's cache size comes along:
-- with CACHE > 1 a session hands out values it cached in earlier
-- transactions without taking the lock again, and the floor stays at 0.
SELECT coalesce(pg_sequence_last_value(pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq')::regclass), 0),
  (SELECT seqcache FROM pg_sequence WHERE seqrelid = pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq')::regclass)
