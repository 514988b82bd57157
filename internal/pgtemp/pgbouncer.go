package pgtemp

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// PgBouncerOptions configures StartPgBouncer. The zero value is a
// transaction pooler on a free port.
type PgBouncerOptions struct {
	// PoolMode is pgbouncer's pool_mode: "session", "transaction" or
	// "statement". Defaults to "transaction".
	PoolMode string
	// PoolSize is default_pool_size, the server connections per database
	// and user. Defaults to 20.
	PoolSize int
	// Bin is the pgbouncer executable. Empty (the default) means
	// FindPgBouncer.
	Bin string
	// StartTimeout bounds how long StartPgBouncer waits for pgbouncer to
	// accept connections. Zero means 15 seconds.
	StartTimeout time.Duration
}

// PgBouncer is a running pgbouncer in front of a Cluster: every database
// of the cluster, user "postgres", trust authentication, listening on
// 127.0.0.1 only (no unix socket).
type PgBouncer struct {
	dir     string
	logPath string
	port    int

	mu       sync.Mutex
	proc     *exec.Cmd
	exited   chan struct{}
	stopping chan struct{} // set by Stop, closed once it is done
}

// FindPgBouncer returns the path of the pgbouncer executable (Debian
// package pgbouncer): on the PATH, else /usr/sbin or /usr/local/sbin, which
// a non-root PATH may lack. The error says how to install it.
func FindPgBouncer() (string, error) {
	if p, err := exec.LookPath("pgbouncer"); err == nil {
		return p, nil
	}
	for _, p := range []string{"/usr/sbin/pgbouncer", "/usr/local/sbin/pgbouncer", "/usr/local/bin/pgbouncer"} {
		if fi, err := os.Stat(p); err == nil && !fi.IsDir() && fi.Mode()&0o111 != 0 {
			return p, nil
		}
	}
	return "", errors.New("pgtemp: pgbouncer not found (not on PATH, not in /usr/sbin): install it, e.g. apt-get install pgbouncer")
}

// StartPgBouncer starts pgbouncer in front of c, with its ini file and
// user list in a fresh temporary directory, as the OS user "postgres" when
// the caller is root (pgbouncer refuses to run as root). It returns once
// pgbouncer accepts TCP connections, or an error prefixed "pgtemp:
// pgbouncer: "; on error nothing is left behind. PgBouncer 1.18 refuses
// startup parameters it does not know, search_path among them: connect
// without one (the server's default search_path applies).
func StartPgBouncer(ctx context.Context, c *Cluster, opts PgBouncerOptions) (*PgBouncer, error) {
	bin := opts.Bin
	if bin == "" {
		var err error
		if bin, err = FindPgBouncer(); err != nil {
			return nil, err
		}
	}
	if opts.PoolMode == "" {
		opts.PoolMode = "transaction"
	}
	if opts.PoolSize <= 0 {
		opts.PoolSize = 20
	}
	if opts.StartTimeout <= 0 {
		opts.StartTimeout = 15 * time.Second
	}
	dir, err := os.MkdirTemp("", "pgtemp-pgbouncer-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: pgbouncer: create temp dir: %w", err)
	}
	b := &PgBouncer{dir: dir, logPath: filepath.Join(dir, "pgbouncer.log")}
	ok := false
	defer func() {
		if !ok {
			_ = b.stop()
			_ = os.RemoveAll(dir)
		}
	}()
	if c.cred != nil {
		if err := os.Chown(dir, int(c.cred.Uid), int(c.cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtemp: pgbouncer: chown temp dir: %w", err)
		}
	}
	userlist := filepath.Join(dir, "userlist.txt")
	if err := os.WriteFile(userlist, []byte("\"postgres\" \"\"\n"), 0o644); err != nil {
		return nil, fmt.Errorf("pgtemp: pgbouncer: %w", err)
	}
	for i := 0; ; i++ {
		if b.port, err = freePort(); err != nil {
			return nil, err
		}
		ini := filepath.Join(dir, "pgbouncer.ini")
		if err := os.WriteFile(ini, []byte(pgbouncerINI(c.port, b.port, userlist, opts)), 0o644); err != nil {
			return nil, fmt.Errorf("pgtemp: pgbouncer: %w", err)
		}
		err = b.start(ctx, bin, ini, c.cred, opts.StartTimeout)
		if err == nil {
			break
		}
		// The free port may have been taken before pgbouncer bound it.
		if i >= 4 || ctx.Err() != nil || !strings.Contains(err.Error(), "in use") {
			return nil, err
		}
	}
	ok = true
	return b, nil
}

// pgbouncerINI is the configuration of a pgbouncer on listenPort in front
// of the cluster on serverPort.
func pgbouncerINI(serverPort, listenPort int, userlist string, opts PgBouncerOptions) string {
	return fmt.Sprintf(`[databases]
* = host=127.0.0.1 port=%d

[pgbouncer]
listen_addr = 127.0.0.1
listen_port = %d
unix_socket_dir =
auth_type = trust
auth_file = %s
pool_mode = %s
default_pool_size = %d
max_client_conn = 500
ignore_startup_parameters = extra_float_digits
`, serverPort, listenPort, userlist, opts.PoolMode, opts.PoolSize)
}

// start runs pgbouncer with ini and waits until it accepts connections.
func (b *PgBouncer) start(ctx context.Context, bin, ini string, cred *syscall.Credential, timeout time.Duration) error {
	logf, err := os.OpenFile(b.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtemp: pgbouncer: open log: %w", err)
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, 2)
	cmd := exec.Command(bin, ini)
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.Dir = b.dir
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = sysProcAttr(cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtemp: pgbouncer: start: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	b.mu.Lock()
	b.proc, b.exited = cmd, exited
	b.mu.Unlock()
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	addr := net.JoinHostPort("127.0.0.1", strconv.Itoa(b.port))
	for {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			_ = c.Close()
			return nil
		}
		select {
		case <-exited:
			b.mu.Lock()
			b.proc, b.exited = nil, nil
			b.mu.Unlock()
			return fmt.Errorf("pgtemp: pgbouncer exited during start-up: %s", b.logSince(logStart))
		case <-ctx.Done():
			_ = b.stop()
			return fmt.Errorf("pgtemp: pgbouncer not accepting connections: %w: %s", ctx.Err(), b.logSince(logStart))
		case <-time.After(20 * time.Millisecond):
		}
	}
}

// DSN returns the URL of database through pgbouncer as user "postgres",
// e.g. "postgres://postgres@127.0.0.1:6432/postgres?sslmode=disable".
func (b *PgBouncer) DSN(database string) string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/%s?sslmode=disable", b.port, database)
}

// Port returns the TCP port pgbouncer listens on at 127.0.0.1.
func (b *PgBouncer) Port() int { return b.port }

// LogPath returns the path of pgbouncer's log (its stderr).
func (b *PgBouncer) LogPath() string { return b.logPath }

// Log returns pgbouncer's log so far, trimmed to its last 4 KiB.
func (b *PgBouncer) Log() string { return b.logSince(0) }

func (b *PgBouncer) logSince(offset int64) string {
	data, err := os.ReadFile(b.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if offset >= 0 && offset <= int64(len(data)) {
		data = data[offset:]
	}
	if len(data) > 4096 {
		data = data[len(data)-4096:]
	}
	return strings.TrimSpace(string(data))
}

// Stop shuts pgbouncer down (SIGTERM, immediate shutdown; SIGKILL after 10
// seconds) and removes its directory. Calling it again is a no-op
// returning nil.
func (b *PgBouncer) Stop() error {
	return stopOnce(&b.mu, &b.stopping, b.stop, b.dir, "pgtemp: pgbouncer")
}

func (b *PgBouncer) stop() error {
	b.mu.Lock()
	proc, exited := b.proc, b.exited
	b.proc, b.exited = nil, nil
	b.mu.Unlock()
	if proc == nil {
		return nil
	}
	if signalUntilExit(proc, exited, []stopStep{{syscall.SIGTERM, 10 * time.Second}, {syscall.SIGKILL, 10 * time.Second}}) {
		return nil
	}
	return fmt.Errorf("pgtemp: pgbouncer: pid %d did not exit", proc.Process.Pid)
}
