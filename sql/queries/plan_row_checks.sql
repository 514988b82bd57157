-- Plans the row checks (rules: each rule of row_check_*.sql in
-- parentheses, separated by commas) on the table's columns, as "new":
-- PL/pgSQL checks a body's types only when it first runs, and a headers
-- column of type json would otherwise make every producer INSERT fail
-- after a successful adopt. LIMIT 0: no row is read.
SELECT /* TEMPLATE: rules */ FROM /* TEMPLATE: table */ AS "new" LIMIT 0
