-- A statement of the grants script: the claims' order guard.
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE /* TEMPLATE: guard */ TO /* TEMPLATE: role */;
