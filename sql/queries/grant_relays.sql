-- A statement of the grants script: the members' heartbeat in
-- <table>_relays.
GRANT SELECT, INSERT, UPDATE, DELETE ON TABLE /* TEMPLATE: relays */ TO /* TEMPLATE: role */;
