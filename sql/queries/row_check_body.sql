-- A fragment, not a statement: the body of an adopted table's row-check
-- trigger function (create_row_check_function.sql), its rules
-- (row_check_rule.sql each, one after the other) and then RETURN NEW. The
-- caller puts it between newlines, so that it is, byte for byte, the body
-- migration 00008 gives the outbox table's function (the tests compare
-- them).
BEGIN
/* TEMPLATE: rules */
    RETURN NEW;
END
