-- The retention's cutoff by the database clock: now() less @retention_us
-- microseconds (Config.Retention). A partition whose upper bound is after
-- it is not looked at.
SELECT now() - @retention_us * interval '1 microsecond'
