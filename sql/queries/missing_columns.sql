-- The names among @columns (text[]) that the table @table (quoted) has
-- no column of, in their order: adopt refuses a table lacking a column
-- its flags name before it changes anything.
SELECT coalesce(array_agg(u.c ORDER BY u.o), '{}')
FROM unnest(@columns::text[]) WITH ORDINALITY AS u(c, o)
WHERE NOT EXISTS (
  SELECT 1 FROM pg_attribute a
  WHERE a.attrelid = @table::regclass AND a.attname = u.c AND a.attnum > 0 AND NOT a.attisdropped
)
