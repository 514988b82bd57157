-- Drops the CHECK constraints an earlier adopt added for the row checks
-- (drops: drop_constraint.sql for each, separated by commas): the
-- triggers replace them (see migrations/00008_row_check_trigger.sql).
ALTER TABLE /* TEMPLATE: table */
  /* TEMPLATE: drops */
