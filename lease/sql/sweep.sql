-- Removes the order-guard registrations of relays long gone (beat.sql).
-- A claim sends it as rarely as it registers its own.
DELETE FROM /* TEMPLATE: guard */ WHERE key LIKE 'relay:%' AND until < now() - interval '1 hour'
