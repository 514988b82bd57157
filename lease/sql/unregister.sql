-- On Claimer.Close: removes the holder's order-guard registration
-- (beat.sql), unless rows it leased are still leased, which relays of
-- older versions must go on respecting.
DELETE FROM /* TEMPLATE: guard */ WHERE key = 'relay:' || @holder
AND NOT EXISTS (SELECT 1 FROM /* TEMPLATE: table */ WHERE locked_by = @holder AND published_at IS NULL AND locked_until > now())
