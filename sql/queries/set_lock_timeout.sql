-- Bounds each wait for a lock in the rest of the transaction (lock_timeout:
-- a literal, partitionLockTimeout) while time partitions are created:
-- ATTACH PARTITION takes SHARE UPDATE EXCLUSIVE on the table and ACCESS
-- EXCLUSIVE on its DEFAULT partition, and a wait behind a long
-- transaction must not queue producers behind it for long. The next round
-- tries again.
SET LOCAL lock_timeout = /* TEMPLATE: lock_timeout */
