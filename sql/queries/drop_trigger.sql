-- Drops the trigger (quoted) of the table, if it exists, before adopt
-- creates it again: CREATE TRIGGER has no OR REPLACE before PostgreSQL
-- 14, and adopt must be idempotent.
DROP TRIGGER IF EXISTS /* TEMPLATE: trigger */ ON /* TEMPLATE: table */
