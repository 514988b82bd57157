package testenv

import (
	"context"
	"net/url"
	"strings"
	"testing"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
)

// Database creates a database of t's own in the shared PostgreSQL, for
// tests that change database-wide settings (ALTER DATABASE ... SET), which
// every new session of a shared database would get. Its Pool and
// ConnString use the default search_path (schema public, Schema "public");
// it is dropped, its sessions terminated, when t ends. t is skipped when
// the shared connection string is not a URL.
func Database(t testing.TB) *TestDB {
	t.Helper()
	base := baseDSN(t)
	u, err := url.Parse(base)
	if err != nil || !strings.HasPrefix(u.Scheme, "postgres") {
		t.Skipf("testenv: Database needs a URL in %s", EnvDatabaseURL)
	}
	name := "test_db_" + randHex(6)
	ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
	defer cancel()
	quoted := pgx.Identifier{name}.Sanitize()
	if err := execOnce(ctx, base, "CREATE DATABASE "+quoted); err != nil {
		t.Fatalf("testenv: create database: %v", err)
	}
	u.Path = "/" + name
	connString := u.String()
	pool, err := pgxpool.New(ctx, connString)
	if err != nil {
		t.Fatalf("testenv: connect: %v", err)
	}
	t.Cleanup(func() {
		pool.Close()
		ctx, cancel := context.WithTimeout(context.Background(), setupTimeout)
		defer cancel()
		if err := execOnce(ctx, base, "DROP DATABASE IF EXISTS "+quoted+" WITH (FORCE)"); err != nil {
			t.Errorf("testenv: drop database %s: %v", name, err)
		}
	})
	return &TestDB{Pool: pool, ConnString: connString, Schema: "public"}
}
