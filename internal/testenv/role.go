package testenv

import (
	"context"
	"errors"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgerrcode"
	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
)

// Role creates a login role of t's own with no privilege but USAGE on the
// test's schema, for tests of what a least-privileged role can do, and
// returns its name and a connection URL for it (ConnString with the user
// replaced). When t ends its privileges and the role are dropped. t is
// skipped when the server does not let the role log in without a password
// (the throwaway clusters trust local connections; a DATABASE_URL server
// may not), or when ConnString is not a URL.
func (db *TestDB) Role(t testing.TB) (name, connString string) {
	t.Helper()
	u, err := url.Parse(db.ConnString)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		t.Skipf("testenv: Role needs a URL connection string")
	}
	name = "role_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	quoted := pgx.Identifier{name}.Sanitize()
	if _, err := db.Pool.Exec(ctx, "CREATE ROLE "+quoted+" LOGIN; GRANT USAGE ON SCHEMA "+pgx.Identifier{db.Schema}.Sanitize()+" TO "+quoted, pgx.QueryExecModeSimpleProtocol); err != nil {
		t.Fatalf("testenv: create role: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		// Its sessions first: DROP ROLE fails while one is open.
		_, _ = db.Pool.Exec(ctx, "SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = $1", name)
		if _, err := db.Pool.Exec(ctx, "DROP OWNED BY "+quoted+"; DROP ROLE "+quoted, pgx.QueryExecModeSimpleProtocol); err != nil {
			t.Errorf("testenv: drop role %s: %v", name, err)
		}
	})
	u.User = url.User(name)
	connString = u.String()
	c, err := pgx.Connect(ctx, connString)
	var pgErr *pgconn.PgError
	if errors.As(err, &pgErr) && pgerrcode.IsInvalidAuthorizationSpecification(pgErr.Code) {
		t.Skipf("testenv: the server does not let role %s log in without a password: %v", name, err)
	}
	if err != nil {
		t.Fatalf("testenv: connect as %s: %v", name, err)
	}
	_ = c.Close(ctx)
	return name, connString
}
