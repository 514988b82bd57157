-- Extends the order guard's 'holds' entry, by the database clock: a
-- release with a delay (@delay_ms milliseconds) or a held dead letter
-- (@delay_ms NULL: forever). While 'holds' lies in the future, claims run
-- their order guard (claim.sql).
INSERT INTO /* TEMPLATE: guard */ (key, until)
VALUES ('holds', CASE WHEN @delay_ms::bigint IS NULL THEN 'infinity'::timestamptz ELSE now() + @delay_ms * interval '1 millisecond' END)
ON CONFLICT (key) DO UPDATE SET until = greatest(/* TEMPLATE: guard */.until, EXCLUDED.until)
