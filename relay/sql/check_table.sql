-- Whether the outbox table exists (and this role may read it): the relay
-- checks it at start to fail at once with the command that creates it.
-- LIMIT 0 reads no row.
SELECT FROM /* TEMPLATE: table */ LIMIT 0
