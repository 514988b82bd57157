-- Fails unless the table has the payload column: the insert trigger reads
-- it, and one the table lacks would fail every producer's INSERT after a
-- successful adopt (PL/pgSQL resolves the body's columns when it first
-- runs). LIMIT 0: no row is read.
SELECT pg_column_size(/* TEMPLATE: payload */) FROM /* TEMPLATE: table */ LIMIT 0
