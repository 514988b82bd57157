package pgtemp

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
)

// StartReplica makes a streaming replica of c: pg_basebackup -R (which
// writes standby.signal and primary_conninfo) into a fresh temporary
// directory, then a postmaster on opts.Port (zero: a free port) that
// follows c as a hot standby: it accepts read-only connections, and
// pg_is_in_recovery() is true until Promote. opts.BinDir defaults to c's,
// opts.Fsync and opts.ExtraConf apply to the replica only. It returns once
// the replica accepts connections, or an error prefixed "pgtemp: " naming
// the failed step; on error nothing is left behind. Stop the replica
// before c, or it logs reconnect attempts until it is stopped.
func (c *Cluster) StartReplica(ctx context.Context, opts Options) (*Cluster, error) {
	if opts.BinDir == "" {
		opts.BinDir = c.binDir
	}
	dir, err := os.MkdirTemp(opts.TempDir, "pgtemp-replica-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: create temp dir: %w", err)
	}
	r := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		binDir:  opts.BinDir,
		cred:    c.cred,
		timeout: opts.StartTimeout,
	}
	if r.timeout <= 0 {
		r.timeout = 60 * time.Second
	}
	ok := false
	defer func() {
		if !ok {
			r.stop()
			_ = os.RemoveAll(dir)
		}
	}()
	if r.cred != nil {
		if err := os.Chown(dir, int(r.cred.Uid), int(r.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtemp: chown temp dir: %w", err)
		}
	}
	cmd := exec.CommandContext(ctx, filepath.Join(r.binDir, "pg_basebackup"),
		"-h", "127.0.0.1", "-p", strconv.Itoa(c.port), "-U", "postgres",
		"-D", r.dataDir,
		"-R",           // standby.signal and primary_conninfo
		"-X", "stream", // the WAL written during the copy comes along
		"--checkpoint", "fast", // do not wait for the next scheduled checkpoint
		"--no-sync",
	)
	var out bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &out
	cmd.Dir = dir
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = sysProcAttr(r.cred)
	if err := cmd.Run(); err != nil {
		return nil, fmt.Errorf("pgtemp: pg_basebackup: %v: %s", err, strings.TrimSpace(out.String()))
	}
	if err := r.startOnPort(ctx, opts); err != nil {
		return nil, err
	}
	ok = true
	return r, nil
}

// Promote ends recovery on a replica made by StartReplica, with
// pg_promote(wait => true): it returns once the server accepts writes, or
// an error prefixed "pgtemp: promote: " (for example when c is not in
// recovery). ctx bounds the wait; PostgreSQL's own bound is 60 seconds.
func (c *Cluster) Promote(ctx context.Context) error {
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return fmt.Errorf("pgtemp: promote: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var promoted bool
	if err := conn.QueryRow(ctx, "SELECT pg_promote(true, 60)").Scan(&promoted); err != nil {
		return fmt.Errorf("pgtemp: promote: %w", err)
	}
	if !promoted {
		return fmt.Errorf("pgtemp: promote: pg_promote did not finish within 60s: %s", c.logSince(-1))
	}
	return nil
}

// InRecovery reports pg_is_in_recovery() of c: true on a replica until it is
// promoted.
func (c *Cluster) InRecovery(ctx context.Context) (bool, error) {
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return false, fmt.Errorf("pgtemp: in recovery: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	var rec bool
	if err := conn.QueryRow(ctx, "SELECT pg_is_in_recovery()").Scan(&rec); err != nil {
		return false, fmt.Errorf("pgtemp: in recovery: %w", err)
	}
	return rec, nil
}

// CatchUp waits until replica c has replayed everything primary had written
// when CatchUp was called (pg_last_wal_replay_lsn() reaches the primary's
// pg_current_wal_lsn()), so that what was committed on primary is visible
// on c. It polls every 10ms until ctx is done.
func (c *Cluster) CatchUp(ctx context.Context, primary *Cluster) error {
	pconn, err := pgx.Connect(ctx, primary.DSN())
	if err != nil {
		return fmt.Errorf("pgtemp: catch up: %w", err)
	}
	var lsn string
	err = pconn.QueryRow(ctx, "SELECT pg_current_wal_lsn()::text").Scan(&lsn)
	pconn.Close(context.WithoutCancel(ctx))
	if err != nil {
		return fmt.Errorf("pgtemp: catch up: primary LSN: %w", err)
	}
	conn, err := pgx.Connect(ctx, c.DSN())
	if err != nil {
		return fmt.Errorf("pgtemp: catch up: %w", err)
	}
	defer conn.Close(context.WithoutCancel(ctx))
	for {
		var done bool
		if err := conn.QueryRow(ctx, "SELECT coalesce(pg_last_wal_replay_lsn() >= $1::pg_lsn, false)", lsn).Scan(&done); err != nil {
			return fmt.Errorf("pgtemp: catch up: %w", err)
		}
		if done {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pgtemp: catch up to %s: %w", lsn, ctx.Err())
		case <-time.After(10 * time.Millisecond):
		}
	}
}

// Demote turns c into a hot standby of primary, as a failover leaves the
// old primary when it comes back as a replica: it shuts c down (fast),
// writes standby.signal and primary_conninfo (primary's port), and starts
// it again on the same port and data directory. It returns once c accepts
// read-only connections; pg_is_in_recovery() is then true. Whether c can
// stream from primary (its timeline may have forked off before c's last
// WAL, which would need pg_rewind) does not matter for that: c stays in
// recovery either way, until Promote.
func (c *Cluster) Demote(ctx context.Context, primary *Cluster) error {
	if err := c.stop(); err != nil {
		return err
	}
	signal := filepath.Join(c.dataDir, "standby.signal")
	if err := os.WriteFile(signal, nil, 0o600); err != nil {
		return fmt.Errorf("pgtemp: demote: %w", err)
	}
	auto := filepath.Join(c.dataDir, "postgresql.auto.conf")
	f, err := os.OpenFile(auto, os.O_APPEND|os.O_WRONLY, 0o600)
	if err != nil {
		return fmt.Errorf("pgtemp: demote: %w", err)
	}
	_, err = fmt.Fprintf(f, "primary_conninfo = 'host=127.0.0.1 port=%d user=postgres'\n", primary.port)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("pgtemp: demote: %w", err)
	}
	if c.cred != nil {
		if err := os.Chown(signal, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return fmt.Errorf("pgtemp: demote: %w", err)
		}
	}
	return c.start(ctx)
}
