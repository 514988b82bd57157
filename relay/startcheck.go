package relay

import (
	"context"
	"errors"
	"time"

	"github.com/jackc/pgx/v5/pgconn"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	outboxsql "github.com/pgoutbox/outbox/sql"
)

// startCheckTimeout bounds the start-up checks of Service.Run.
const startCheckTimeout = 10 * time.Second

// checkAtStart runs Service.Run's start-up checks on the outbox table:
// it returns the error that refuses to relay it (an UNLOGGED table or
// sequence: *outboxsql.UnloggedError; UPDATEs failing for want of a
// replica identity: *outboxsql.ReplicaIdentityError), and logs in one line
// every privilege the role lacks (sqladmin.MissingPrivileges with
// ServiceConfig.Privileges). Catalog lookups only. A database that does not
// answer yet skips the checks with a warning: the relay retries and says
// why itself.
func (s *Service) checkAtStart(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, startCheckTimeout)
	defer cancel()
	table := s.claimer.Config().Table
	for _, check := range []func(context.Context, sqladmin.Querier, string) error{sqladmin.CheckDurability, sqladmin.CheckReplicaIdentity} {
		err := check(ctx, s.pool, table)
		var ue *outboxsql.UnloggedError
		var re *outboxsql.ReplicaIdentityError
		switch {
		case errors.As(err, &ue) || errors.As(err, &re):
			return err
		case err != nil:
			s.skippedCheck(err)
			return nil
		}
	}
	role, missing, err := sqladmin.MissingPrivileges(ctx, s.pool, table, s.privileges)
	if err != nil {
		s.skippedCheck(err)
		return nil
	}
	if len(missing) > 0 {
		names := make([]string, len(missing))
		for i, p := range missing {
			names[i] = p.String()
		}
		s.log.Error("the relay's role lacks privileges it needs: the steps named fail until they are granted (outbox-relay grants --role ROLE --table TABLE prints the GRANT script; docs/database.md)",
			zap.String("role", role), zap.String("table", table), zap.Strings("missing", names))
	}
	return nil
}

// skippedCheck logs that the start-up checks could not run.
func (s *Service) skippedCheck(err error) {
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgErr.Code == "42P01" {
		return // no table: the claims say so
	}
	s.log.Warn("start-up checks of the outbox table skipped: the database did not answer them", zap.Error(err))
}
