-- A fragment, not a statement: the sequence (its oid) of the seq column
-- of the table c, or NULL when it has none.
--
-- It is found through pg_depend, as pg_get_serial_sequence finds it (an
-- identity column's sequence depends on it with deptype 'i', a serial's
-- or one adopt created with 'a'): pg_get_serial_sequence raises an error
-- for a missing table or column, and the planner may evaluate it with
-- constant arguments (estimating a selectivity) even where a CASE would
-- not. An index on the column depends on it with deptype 'a' too, so only
-- a sequence (relkind 'S') is taken.
SELECT d.objid FROM pg_depend d JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid
  JOIN pg_class s ON s.oid = d.objid AND s.relkind = 'S'
  WHERE d.classid = 'pg_class'::regclass AND d.refclassid = 'pg_class'::regclass AND d.refobjid = c.oid
    AND a.attname = 'seq' AND NOT a.attisdropped AND d.deptype IN ('a', 'i') LIMIT 1
