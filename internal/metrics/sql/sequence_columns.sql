-- A fragment of table_check.sql (three of its columns), not a statement:
-- the table's seq sequence (the sequence slot, quoted as regclass prints
-- it; sequence_literal, the same as a string literal), which the table
-- check looks up at its first run: its last value and whether nextval has
-- handed that value out yet (the next seq), and whether the sequence is
-- UNLOGGED (a crash then restarts it).
(SELECT last_value FROM /* TEMPLATE: sequence */), (SELECT is_called FROM /* TEMPLATE: sequence */),
  (SELECT relpersistence = 'u' FROM pg_class WHERE oid = /* TEMPLATE: sequence_literal */::regclass)
