-- A statement of the grants script: a writer's INSERT (outbox.Add or a
-- plain INSERT); the seq identity needs no privilege on its sequence.
GRANT INSERT ON TABLE /* TEMPLATE: table */ TO /* TEMPLATE: role */;
