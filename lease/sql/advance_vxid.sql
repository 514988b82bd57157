-- The transactions holding a lock on the outbox's sequence, for a floor
-- marker (advance_seq.sql), read after the sequence's last value.
--
-- A transaction that calls nextval on a sequence takes a RowExclusiveLock
-- on it and keeps it until it ends (src/backend/commands/sequence.c,
-- lock_and_open_sequence: "owned by the top transaction"), before it takes
-- a value, so every transaction that may still commit a row with a seq at
-- or below the marker's is among them: a COPY buffering rows it has taken
-- seqs for, an INSERT with a slow expression after its nextval, a
-- transaction PREPAREd after it (prepared transactions keep their locks;
-- pg_locks shows them without a pid). A transaction that took no seq (an
-- idle session holding a REPEATABLE READ snapshot, a long report) does
-- not hold the floor back.
SELECT coalesce(array_agg(DISTINCT l.virtualtransaction), '{}')
FROM pg_locks l
WHERE l.locktype = 'relation' AND l.relation = pg_get_serial_sequence(/* TEMPLATE: table_literal */, 'seq')::regclass
  AND l.database = (SELECT oid FROM pg_database WHERE datname = current_database())
  AND l.granted AND l.pid IS DISTINCT FROM pg_backend_pid()
