-- A statement of the grants script: the held-snapshot watch sees other
-- roles' transactions in pg_stat_activity (granting it needs a superuser,
-- or ADMIN OPTION on pg_read_all_stats).
GRANT pg_read_all_stats TO /* TEMPLATE: role */;
