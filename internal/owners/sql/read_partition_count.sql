-- The table's number of key partitions (`outbox-relay status`).
SELECT partitions FROM /* TEMPLATE: partitioning */
