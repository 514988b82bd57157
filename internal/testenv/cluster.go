package testenv

import (
	"context"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/pgtemp"
)

// Cluster starts a throwaway PostgreSQL cluster of t's own (pgtemp, fsync
// off), for tests that change cluster-wide state (a read-only database, a
// replica, a pooler in front); it is stopped when t ends. t is skipped
// where the server binaries are missing. Start-up is bounded by 2 minutes.
func Cluster(t testing.TB) *pgtemp.Cluster {
	t.Helper()
	return ClusterWith(t, pgtemp.Options{})
}

// ClusterWith is Cluster with opts, for a test that needs server settings
// the shared cluster does not have (wal_level = logical for replication
// slots, say: opts.ExtraConf).
func ClusterWith(t testing.TB, opts pgtemp.Options) *pgtemp.Cluster {
	t.Helper()
	if _, err := pgtemp.FindBinDir(); err != nil {
		t.Skipf("no PostgreSQL server binaries: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	c, err := pgtemp.Start(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.Stop() })
	return c
}

// Replica starts a hot standby of primary (pg_basebackup -R, streaming),
// stopped when t ends (before primary, whose cleanup was registered
// first). Start-up is bounded by 2 minutes.
func Replica(t testing.TB, primary *pgtemp.Cluster) *pgtemp.Cluster {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	r, err := primary.StartReplica(ctx, pgtemp.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = r.Stop() })
	return r
}
