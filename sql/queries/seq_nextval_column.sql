-- A fragment of adopt_columns.sql, for a partitioned table, to which
-- PostgreSQL (before 17) refuses to add an identity column when it has
-- partitions: seq filled by nextval of a sequence
-- (create_seq_sequence.sql; sequence_literal: its quoted name as a
-- literal) that the column owns (own_seq_sequence.sql), as serial's is,
-- which the claim floor and the checks find the same way (pg_depend).
-- Its default, unlike GENERATED ALWAYS, lets an INSERT give a seq of its
-- own: producers must not.
ADD COLUMN IF NOT EXISTS seq bigint NOT NULL DEFAULT nextval(/* TEMPLATE: sequence_literal */::regclass),
