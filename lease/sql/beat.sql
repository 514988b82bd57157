-- Registers a holder of this relay in the order guard: in a claim's own
-- transaction, a time by which all its leases will have ended. Other
-- relays' claims read it to know whether they need the order guard.
--
-- It writes now() + 3 leases, and the Claimer writes again in the first
-- claim after half a lease has passed (by the monotonic clock), so every
-- lease of a claim in between, which ends at most half a lease plus that
-- claim's own duration later, is covered with more than a lease to spare,
-- without an extra write per claim.
INSERT INTO /* TEMPLATE: guard */ (key, until)
VALUES ('relay:' || @holder, now() + 3 * @lease_ms * interval '1 millisecond')
ON CONFLICT (key) DO UPDATE SET until = EXCLUDED.until
