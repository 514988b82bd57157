-- The check of the claims' order guard beside the outbox table (guard:
-- <table>_order_guard, sqlname.OrderGuard), after check_table.sql: it
-- returns no row, and fails when the guard is missing (SQLSTATE 42P01),
-- e.g. for a table adopted by a version that named the guard of a long
-- table name differently; adopt or migrate creates it.
SELECT key, until FROM /* TEMPLATE: guard */ LIMIT 0
