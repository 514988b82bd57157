-- The sequence of the seq column of the table @table (quoted) as
-- regclass prints it (quoted and schema-qualified as needed), NULL when
-- the column has none (seq_of.sql). SequenceOf.
SELECT (/* TEMPLATE: seq_of */)::regclass::text FROM pg_class c WHERE c.oid = @table::regclass
