-- A fragment of drop_row_check_constraints.sql: drops one CHECK
-- constraint (constraint: quoted), if it exists.
DROP CONSTRAINT IF EXISTS /* TEMPLATE: constraint */
