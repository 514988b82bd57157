-- The state of the table's seq sequence (sequence: its name as regclass
-- prints it, which is also @sequence): its last value and whether nextval
-- has returned it (then the next value is one more), and whether the
-- sequence is unlogged. Inspect compares the next value with the table's
-- highest seq (max_seq.sql): a sequence restarted below it (a
-- logical-replication cutover does not carry sequences over) makes new
-- events sort below published ones.
SELECT last_value, is_called, (SELECT relpersistence = 'u' FROM pg_class WHERE oid = @sequence::regclass) FROM /* TEMPLATE: sequence */
