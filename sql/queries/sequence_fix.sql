-- Not run by pgoutbox: the statement SequenceBehindError.Fix gives to run
-- by hand, which moves the table's seq sequence (found by the table's
-- name, table_literal: as a person would type it, as a literal) past the
-- table's highest seq (max_seq), so that new events sort above the
-- published ones again.
SELECT setval(pg_get_serial_sequence(/* TEMPLATE: table_literal */,'seq'), /* TEMPLATE: max_seq */)
