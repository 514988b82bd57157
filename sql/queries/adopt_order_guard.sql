-- The claims' order guard beside an adopted table (guard:
-- <table>_order_guard), as migration 00005 creates it.
CREATE TABLE IF NOT EXISTS /* TEMPLATE: guard */ (key text PRIMARY KEY, until timestamptz NOT NULL)
