-- The owner of each key partition ('' for nobody), in partition order.
SELECT partition, coalesce(owner, '') FROM /* TEMPLATE: partitions */ ORDER BY partition
