-- The row-check trigger function of an adopted table (function: in the
-- table's schema), as migration 00008 creates it (body_literal: the
-- literal of row_check_body.sql): with search_path pg_catalog, pg_temp,
-- so that a writer's search_path cannot shadow what the body calls.
CREATE OR REPLACE FUNCTION /* TEMPLATE: function */() RETURNS trigger LANGUAGE plpgsql SET search_path = pg_catalog, pg_temp AS /* TEMPLATE: body_literal */
