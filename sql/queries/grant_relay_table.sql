-- A statement of the grants script: the relay's claims and marks
-- (SELECT, UPDATE) and retention's deletes of published rows (DELETE) on
-- the outbox table.
GRANT SELECT, UPDATE, DELETE ON TABLE /* TEMPLATE: table */ TO /* TEMPLATE: role */;
