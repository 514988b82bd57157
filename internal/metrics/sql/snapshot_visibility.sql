-- Whether this role sees every role's sessions in pg_stat_activity
-- (oldest_snapshot.sql): without the privileges of pg_read_all_stats (or
-- a superuser's) their xact_start and backend_xmin read as NULL. Read
-- once, at the refresher's start.
SELECT current_user::text, pg_has_role('pg_read_all_stats', 'USAGE')
