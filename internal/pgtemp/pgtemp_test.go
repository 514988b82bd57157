package pgtemp

import (
	"context"
	"os"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

func selectOne(t *testing.T, ctx context.Context, dsn string) {
	t.Helper()
	conn, err := pgx.Connect(ctx, dsn)
	if err != nil {
		t.Fatalf("connect %s: %v", dsn, err)
	}
	defer conn.Close(ctx)
	var n int
	if err := conn.QueryRow(ctx, "SELECT 1").Scan(&n); err != nil || n != 1 {
		t.Fatalf("SELECT 1 = %d, %v", n, err)
	}
}

func TestStartRestartStop(t *testing.T) {
	if _, err := FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	c, err := Start(ctx, Options{ExtraConf: map[string]string{"application_name": "pgtemp_test"}})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			_ = c.Stop()
		}
	}()
	if c.Port() == 0 {
		t.Fatal("port 0")
	}
	selectOne(t, ctx, c.DSN())

	// Settings: fsync off by default, max_connections 200.
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	var fsync, maxConns, enc string
	if err := conn.QueryRow(ctx, "SELECT current_setting('fsync'), current_setting('max_connections'), current_setting('server_encoding')").Scan(&fsync, &maxConns, &enc); err != nil {
		t.Fatal(err)
	}
	if fsync != "off" || maxConns != "200" || enc != "UTF8" {
		t.Fatalf("fsync=%s max_connections=%s encoding=%s", fsync, maxConns, enc)
	}

	port := c.Port()
	if err := c.Restart(ctx); err != nil {
		t.Fatal(err)
	}
	if c.Port() != port {
		t.Fatalf("port changed %d -> %d", port, c.Port())
	}
	// The old connection was terminated by the restart.
	if err := conn.Ping(ctx); err == nil {
		t.Error("connection survived restart")
	}
	conn.Close(ctx)
	selectOne(t, ctx, c.DSN())

	dir := c.Dir()
	if err := c.Stop(); err != nil {
		t.Fatal(err)
	}
	stopped = true
	if _, err := os.Stat(dir); !os.IsNotExist(err) {
		t.Fatalf("dir %s still there: %v", dir, err)
	}
	if err := c.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if err := c.Restart(ctx); err == nil {
		t.Fatal("Restart after Stop succeeded")
	}
}

func TestFixedPortAndFsync(t *testing.T) {
	if _, err := FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	ctx := context.Background()
	port, err := freePort()
	if err != nil {
		t.Fatal(err)
	}
	c, err := Start(ctx, Options{Port: port, Fsync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	if c.Port() != port {
		t.Fatalf("port %d, want %d", c.Port(), port)
	}
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var fsync string
	if err := conn.QueryRow(ctx, "SHOW fsync").Scan(&fsync); err != nil || fsync != "on" {
		t.Fatalf("fsync=%q err=%v", fsync, err)
	}

	// A second cluster on the same port fails with the server's message.
	_, err = Start(ctx, Options{Port: port})
	if err == nil {
		t.Fatal("second cluster on the same port started")
	}
	t.Logf("expected error: %v", err)
}

func TestVersionLess(t *testing.T) {
	for _, tc := range []struct {
		a, b string
		want bool
	}{
		{"9.6", "15", true},
		{"15", "16", true},
		{"16", "15", false},
		{"15", "15.1", true},
		{"10", "9.6", false},
	} {
		if got := versionLess(tc.a, tc.b); got != tc.want {
			t.Errorf("versionLess(%q, %q) = %v", tc.a, tc.b, got)
		}
	}
}

func TestFindBinDirEnv(t *testing.T) {
	t.Setenv("PG_BINDIR", t.TempDir())
	if _, err := FindBinDir(); err == nil {
		t.Fatal("empty PG_BINDIR accepted")
	}
}
