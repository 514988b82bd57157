-- The row checks of an updated row of an adopted table (trigger:
-- <table>_row_checks_on_update), run only by an UPDATE of a checked
-- column (columns, separated by commas), which the relay's updates never
-- name. AFTER, not BEFORE UPDATE, for the reason migration 00008 gives: a
-- BEFORE UPDATE trigger would lock every row the relay updates.
CREATE TRIGGER /* TEMPLATE: trigger */ AFTER UPDATE OF /* TEMPLATE: columns */ ON /* TEMPLATE: table */
    FOR EACH ROW EXECUTE FUNCTION /* TEMPLATE: function */()
