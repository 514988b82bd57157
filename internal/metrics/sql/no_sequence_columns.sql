-- A fragment of table_check.sql (three of its columns), not a statement:
-- sequence_columns.sql's columns for a table whose seq column has no
-- sequence: nothing to check.
NULL::bigint, NULL::bool, NULL::bool
