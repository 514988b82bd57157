package pgtemp

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
)

// TestReplicaFollowsThenPromotes: a replica is a hot standby (read-only,
// in recovery) that sees what the primary commits; once promoted it takes
// writes. The old primary, demoted, is a standby on its port until
// promoted again.
func TestReplicaFollowsThenPromotes(t *testing.T) {
	if _, err := FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	primary, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer primary.Stop()
	replica, err := primary.StartReplica(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer replica.Stop()
	if replica.Port() == primary.Port() || replica.Dir() == primary.Dir() {
		t.Fatalf("replica shares the primary's port or directory: %d %s", replica.Port(), replica.Dir())
	}
	exec := func(dsn, sql string) error {
		conn, err := pgx.Connect(ctx, dsn)
		if err != nil {
			return err
		}
		defer conn.Close(ctx)
		_, err = conn.Exec(ctx, sql)
		return err
	}
	if err := exec(primary.DSN(), "CREATE TABLE t (n int); INSERT INTO t VALUES (1)"); err != nil {
		t.Fatal(err)
	}
	if err := replica.CatchUp(ctx, primary); err != nil {
		t.Fatal(err)
	}
	if rec, err := replica.InRecovery(ctx); err != nil || !rec {
		t.Fatalf("replica InRecovery = %v, %v; want true", rec, err)
	}
	if rec, err := primary.InRecovery(ctx); err != nil || rec {
		t.Fatalf("primary InRecovery = %v, %v; want false", rec, err)
	}
	selectOne(t, ctx, replica.DSN())
	if err := exec(replica.DSN(), "SELECT n FROM t"); err != nil {
		t.Fatalf("the replica does not see the primary's table: %v", err)
	}
	if err := exec(replica.DSN(), "INSERT INTO t VALUES (2)"); err == nil || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("insert on the standby: %v, want SQLSTATE 25006", err)
	}
	if err := primary.Promote(ctx); err == nil {
		t.Fatal("Promote on a primary succeeded, want an error")
	}
	if err := replica.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if rec, err := replica.InRecovery(ctx); err != nil || rec {
		t.Fatalf("promoted replica InRecovery = %v, %v; want false", rec, err)
	}
	if err := exec(replica.DSN(), "INSERT INTO t VALUES (2)"); err != nil {
		t.Fatalf("insert on the promoted replica: %v", err)
	}

	// The old primary comes back as a standby of the new one, on its port.
	port := primary.Port()
	if err := primary.Demote(ctx, replica); err != nil {
		t.Fatal(err)
	}
	if rec, err := primary.InRecovery(ctx); err != nil || !rec || primary.Port() != port {
		t.Fatalf("demoted primary InRecovery = %v, %v on port %d; want true on %d", rec, err, primary.Port(), port)
	}
	if err := exec(primary.DSN(), "INSERT INTO t VALUES (3)"); err == nil || !strings.Contains(err.Error(), "25006") {
		t.Fatalf("insert on the demoted primary: %v, want SQLSTATE 25006", err)
	}
	if err := primary.Promote(ctx); err != nil {
		t.Fatal(err)
	}
	if err := exec(primary.DSN(), "INSERT INTO t VALUES (3)"); err != nil {
		t.Fatalf("insert on the primary promoted again: %v", err)
	}
}

// TestPgBouncerTransactionPooling: through StartPgBouncer's default
// transaction pooler, queries work and the session is not the server's
// (the backend key pgbouncer announces is not the backend's PID).
func TestPgBouncerTransactionPooling(t *testing.T) {
	if _, err := FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	if _, err := FindPgBouncer(); err != nil {
		t.Skipf("%v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := Start(ctx, Options{})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	b, err := StartPgBouncer(ctx, c, PgBouncerOptions{})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := pgx.Connect(ctx, b.DSN("postgres")+"&default_query_exec_mode=exec")
	if err != nil {
		t.Fatalf("connect through pgbouncer: %v\n%s", err, b.Log())
	}
	var pid uint32
	if err := conn.QueryRow(ctx, "SELECT pg_backend_pid()").Scan(&pid); err != nil {
		t.Fatal(err)
	}
	if pid == conn.PgConn().PID() {
		t.Errorf("backend PID %d is the PID pgbouncer announced: is it a pooler?", pid)
	}
	conn.Close(ctx)
	if err := b.Stop(); err != nil {
		t.Fatal(err)
	}
	if err := b.Stop(); err != nil {
		t.Fatalf("second Stop: %v", err)
	}
	if _, err := pgx.Connect(ctx, b.DSN("postgres")+"&connect_timeout=2"); err == nil {
		t.Fatal("pgbouncer still accepts connections after Stop")
	}
}
