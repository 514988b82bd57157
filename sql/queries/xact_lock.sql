-- Takes a transaction-level advisory lock (lock: sqlname.XactLock's
-- expression, of a class on the table), which serializes adopt, or the
-- creation of one table's time partitions, across processes.
SELECT /* TEMPLATE: lock */
