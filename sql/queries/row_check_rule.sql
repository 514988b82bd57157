-- A fragment, not a statement: one rule of the row-check trigger function
-- (row_check_body.sql) as migration 00008 writes it: unless the rule
-- (rule: a row_check_*.sql) holds, a check_violation (SQLSTATE 23514)
-- naming its constraint (constraint_literal) with PostgreSQL's own
-- message for a CHECK constraint, and a DETAIL giving the rule
-- (detail_literal). A rule that evaluates to NULL passes, as a CHECK
-- constraint's does. Its lines, indentation included, must stay the
-- migration's.
    IF NOT (/* TEMPLATE: rule */) THEN
        RAISE EXCEPTION USING ERRCODE = 'check_violation', CONSTRAINT = /* TEMPLATE: constraint_literal */,
            TABLE = TG_TABLE_NAME, SCHEMA = TG_TABLE_SCHEMA,
            MESSAGE = format('new row for relation "%s" violates check constraint "%s"', TG_TABLE_NAME, /* TEMPLATE: constraint_literal */),
            DETAIL = /* TEMPLATE: detail_literal */;
    END IF;
