-- Sets the plan settings (plan_settings.sql) for the rest of the
-- (implicit) transaction. A claim that registers the relay in the order
-- guard starts with this one, not async_commit.sql: it commits
-- synchronously, because relays of older versions skip their guard on the
-- strength of that registration, so a database crash must not lose it
-- while its leases survive.
SELECT /* TEMPLATE: plan_settings */
