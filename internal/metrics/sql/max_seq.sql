-- The table's highest seq, for the fix a sequence behind the table's seqs
-- needs (outboxsql.SequenceBehindError: setval to at least this). One scan
-- of the table, read once per episode, when the table check first finds
-- the sequence behind.
SELECT max(seq) FROM /* TEMPLATE: table */
