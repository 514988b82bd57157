-- The row checks of a new row of an adopted table (trigger:
-- <table>_row_checks), as migration 00008 creates them.
CREATE TRIGGER /* TEMPLATE: trigger */ BEFORE INSERT ON /* TEMPLATE: table */
    FOR EACH ROW EXECUTE FUNCTION /* TEMPLATE: function */()
