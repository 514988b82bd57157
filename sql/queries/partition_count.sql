-- The table's number of key partitions, fixed when migration 00009 ran:
-- migrate refuses a MigrateOptions.Partitions other than it.
SELECT partitions FROM /* TEMPLATE: partitioning */
