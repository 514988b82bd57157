-- The owner of each key partition ('' for nobody) and since when
-- (`outbox-relay status`).
SELECT partition, coalesce(owner, ''), since FROM /* TEMPLATE: partitions */ ORDER BY partition
