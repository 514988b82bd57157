-- The order the rows already in the table were written in, read before
-- adopt_columns.sql adds seq: adding it rewrites the table and numbers the
-- rows in the order they lie on disk, which is not the order they were
-- written in once rows were deleted and their space reused (a Debezium
-- table whose producers delete their rows). Rows are ordered by the
-- transaction that wrote them (age(xmin), oldest first: the rewrite loses
-- xmin), then by the statement within it (cmin), then by their place on
-- disk. A transaction's ID is taken at its first write, not its commit:
-- two transactions writing one aggregate at once may still be numbered
-- in the order they began writing. Kept by id, for
-- adopt_renumber_seq.sql, until the transaction ends; none when the table
-- has seq already (a concurrent adopt added it before this one got the
-- table's lock, and producers may have written rows since).
CREATE TEMP TABLE pgoutbox_adopt_order ON COMMIT DROP AS
  SELECT id, row_number() OVER (ORDER BY age(xmin) DESC, cmin::text::bigint, tableoid, ctid) AS n FROM /* TEMPLATE: table */
  WHERE NOT EXISTS (SELECT 1 FROM pg_attribute a WHERE a.attrelid = /* TEMPLATE: table_literal */::regclass
    AND a.attname = 'seq' AND NOT a.attisdropped)
