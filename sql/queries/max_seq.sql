-- The table's highest seq, 0 when it is empty, for Inspect's comparison
-- with its sequence (sequence_state.sql). It reads the whole table: a
-- moment on a large one.
SELECT coalesce(max(seq), 0) FROM /* TEMPLATE: table */
