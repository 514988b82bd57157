-- Every member, live or whose membership ran out (`outbox-relay status`).
SELECT member, relay_id, started_at, renewed_at, until, until > now() FROM /* TEMPLATE: relays */ ORDER BY member
