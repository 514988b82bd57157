// Package pgtemp runs a throwaway PostgreSQL cluster for tests, benchmarks
// and local development.
//
// Start runs initdb into a fresh temporary directory and starts a postmaster
// listening on 127.0.0.1 only (plus a unix socket inside that directory),
// with trust authentication for the superuser "postgres". Stop shuts it down
// and deletes the directory. Nothing is installed system-wide.
//
// The server binaries (initdb, postgres) are located, in order, through the
// PG_BINDIR environment variable, `pg_config --bindir`, the PATH, and
// Debian's /usr/lib/postgresql/<version>/bin convention (highest version
// wins). initdb and postgres refuse to run as root; when the calling process
// is root, the cluster is created and run as the OS user "postgres", which
// must exist.
//
// The postmaster is a child of the calling process, started with
// PR_SET_PDEATHSIG on Linux so that it does not outlive a crashed caller.
//
// Cluster.StartReplica makes a streaming hot standby of a cluster
// (pg_basebackup -R), which Cluster.Promote promotes; StartPgBouncer puts a
// pgbouncer (Debian package pgbouncer) in front of a cluster, in
// transaction pooling mode by default.
package pgtemp

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"os/user"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Options configures Start. The zero value is a sensible test cluster: a
// free port, fsync off, binaries discovered automatically.
type Options struct {
	// Port is the TCP port to listen on at 127.0.0.1. Zero (the default)
	// picks a free port.
	Port int

	// Fsync sets the server's fsync setting. The default, false, makes the
	// cluster fast and crash-unsafe, which is what tests want; benchmarks
	// that must measure durable commits set it to true.
	Fsync bool

	// ExtraConf holds additional server settings, passed as
	// `-c name=value`; they override the defaults set by Start
	// (listen_addresses, port, unix_socket_directories, max_connections,
	// fsync). Nil means none.
	ExtraConf map[string]string

	// BinDir is the directory holding initdb and postgres. Empty (the
	// default) means discover it; see the package documentation.
	BinDir string

	// TempDir is the parent directory for the cluster's temporary
	// directory. Empty means os.TempDir(). When running as root it must be
	// traversable by the "postgres" OS user.
	TempDir string

	// StartTimeout bounds how long Start and Restart wait for the server to
	// accept connections. Zero means 60 seconds.
	StartTimeout time.Duration
}

// Cluster is a running throwaway cluster. Its methods are safe for
// concurrent use.
type Cluster struct {
	dir     string // temporary directory; data/ and the unix socket live here
	dataDir string
	logPath string
	binDir  string
	port    int
	args    []string // postgres command-line arguments
	cred    *syscall.Credential
	timeout time.Duration

	mu       sync.Mutex
	proc     *exec.Cmd
	exited   chan struct{} // closed when proc has exited
	stopping chan struct{} // set by Stop, closed once it is done
}

// Start creates and starts a new cluster as described by opts. It returns
// once the server accepts connections, or an error prefixed "pgtemp: " that
// names the failed step (e.g. "pgtemp: initdb: <stderr>"). On error nothing
// is left behind. ctx bounds the whole start-up.
func Start(ctx context.Context, opts Options) (*Cluster, error) {
	binDir := opts.BinDir
	if binDir == "" {
		var err error
		if binDir, err = FindBinDir(); err != nil {
			return nil, err
		}
	}
	cred, err := credential()
	if err != nil {
		return nil, err
	}
	dir, err := os.MkdirTemp(opts.TempDir, "pgtemp-")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: create temp dir: %w", err)
	}
	c := &Cluster{
		dir:     dir,
		dataDir: filepath.Join(dir, "data"),
		logPath: filepath.Join(dir, "postgres.log"),
		binDir:  binDir,
		cred:    cred,
		timeout: opts.StartTimeout,
	}
	if c.timeout <= 0 {
		c.timeout = 60 * time.Second
	}
	ok := false
	defer func() {
		if !ok {
			c.stop()
			_ = os.RemoveAll(dir)
		}
	}()
	if cred != nil {
		if err := os.Chown(dir, int(cred.Uid), int(cred.Gid)); err != nil {
			return nil, fmt.Errorf("pgtemp: chown temp dir: %w", err)
		}
	}
	if err := c.initdb(ctx); err != nil {
		return nil, err
	}
	if err := c.startOnPort(ctx, opts); err != nil {
		return nil, err
	}
	ok = true
	return c, nil
}

// startOnPort starts the postmaster on opts.Port, or on a free port: a port
// picked by binding :0 may be taken by someone else before the postmaster
// binds it, so it retries a few times with a fresh port.
func (c *Cluster) startOnPort(ctx context.Context, opts Options) error {
	attempts := 1
	if opts.Port == 0 {
		attempts = 5
	}
	for i := 0; ; i++ {
		port := opts.Port
		if port == 0 {
			var err error
			if port, err = freePort(); err != nil {
				return err
			}
		}
		c.port = port
		c.args = serverArgs(c.dataDir, c.dir, port, opts)
		err := c.start(ctx)
		if err == nil {
			return nil
		}
		if i+1 >= attempts || ctx.Err() != nil || !strings.Contains(err.Error(), "already in use") {
			return err
		}
	}
}

// DSN returns the connection URL of the cluster's "postgres" database as the
// superuser "postgres", e.g.
// "postgres://postgres@127.0.0.1:54321/postgres?sslmode=disable".
func (c *Cluster) DSN() string {
	return fmt.Sprintf("postgres://postgres@127.0.0.1:%d/postgres?sslmode=disable", c.port)
}

// Port returns the TCP port the server listens on at 127.0.0.1.
func (c *Cluster) Port() int { return c.port }

// Dir returns the cluster's temporary directory. It holds the data
// directory ("data"), the unix socket and the server log ("postgres.log").
func (c *Cluster) Dir() string { return c.dir }

// LogPath returns the path of the server's log file.
func (c *Cluster) LogPath() string { return c.logPath }

// Stop shuts the server down ("fast" mode: open sessions are terminated,
// in-progress transactions rolled back), escalating to immediate shutdown
// and then SIGKILL if it does not exit within 30 and 10 seconds, and removes
// the temporary directory. Calling Stop again is a no-op returning nil.
func (c *Cluster) Stop() error {
	return stopOnce(&c.mu, &c.stopping, c.stop, c.dir, "pgtemp")
}

// stopOnce runs stop and removes dir the first time it is called for a
// process (*stopping, guarded by mu, is then closed when that is done);
// later calls wait for the first to finish, then return nil.
func stopOnce(mu *sync.Mutex, stopping *chan struct{}, stop func() error, dir, what string) error {
	mu.Lock()
	if ch := *stopping; ch != nil {
		mu.Unlock()
		<-ch
		return nil
	}
	ch := make(chan struct{})
	*stopping = ch
	mu.Unlock()
	defer close(ch)
	err := stop()
	if rerr := os.RemoveAll(dir); rerr != nil && err == nil {
		err = fmt.Errorf("%s: remove %s: %w", what, dir, rerr)
	}
	return err
}

// stopStep is a signal and how long to wait for the process to exit.
type stopStep struct {
	sig  syscall.Signal
	wait time.Duration
}

// signalUntilExit sends each step's signal until the process exits
// (exited is closed); false when it outlived them all.
func signalUntilExit(proc *exec.Cmd, exited <-chan struct{}, steps []stopStep) bool {
	for _, s := range steps {
		_ = proc.Process.Signal(s.sig)
		select {
		case <-exited:
			return true
		case <-time.After(s.wait):
		}
	}
	return false
}

// Restart stops the server with a fast shutdown and starts it again on the
// same port and data directory, returning once it accepts connections.
// Existing connections are broken. It fails after Stop.
func (c *Cluster) Restart(ctx context.Context) error {
	c.mu.Lock()
	stopped := c.stopping != nil
	c.mu.Unlock()
	if stopped {
		return errors.New("pgtemp: restart: cluster is stopped")
	}
	if err := c.stop(); err != nil {
		return err
	}
	return c.start(ctx)
}

// stop shuts the current postmaster down, if any, and waits for it to exit.
func (c *Cluster) stop() error {
	c.mu.Lock()
	proc, exited := c.proc, c.exited
	c.proc, c.exited = nil, nil
	c.mu.Unlock()
	if proc == nil {
		return nil
	}
	if signalUntilExit(proc, exited, []stopStep{
		{syscall.SIGINT, 30 * time.Second},  // fast shutdown
		{syscall.SIGQUIT, 10 * time.Second}, // immediate shutdown
		{syscall.SIGKILL, 10 * time.Second},
	}) {
		return nil
	}
	return fmt.Errorf("pgtemp: stop: postmaster pid %d did not exit", proc.Process.Pid)
}

// start launches the postmaster and waits until it is ready.
func (c *Cluster) start(ctx context.Context) error {
	logf, err := os.OpenFile(c.logPath, os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("pgtemp: open log: %w", err)
	}
	defer logf.Close()
	logStart, _ := logf.Seek(0, 2)
	// A postmaster.pid left by a killed server would stop the new one.
	pidFile := filepath.Join(c.dataDir, "postmaster.pid")

	cmd := exec.Command(filepath.Join(c.binDir, "postgres"), c.args...)
	cmd.Stdout = logf
	cmd.Stderr = logf
	cmd.Dir = c.dir
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = sysProcAttr(c.cred)
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("pgtemp: start postgres: %w", err)
	}
	exited := make(chan struct{})
	go func() {
		_ = cmd.Wait()
		close(exited)
	}()
	c.mu.Lock()
	c.proc, c.exited = cmd, exited
	c.mu.Unlock()

	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	tick := time.NewTicker(20 * time.Millisecond)
	defer tick.Stop()
	for {
		if ready(pidFile, cmd.Process.Pid) {
			return nil
		}
		select {
		case <-exited:
			c.mu.Lock()
			c.proc, c.exited = nil, nil
			c.mu.Unlock()
			return fmt.Errorf("pgtemp: postgres exited during start-up: %s", c.logSince(logStart))
		case <-ctx.Done():
			_ = c.stop()
			return fmt.Errorf("pgtemp: postgres not ready: %w: %s", ctx.Err(), c.logSince(logStart))
		case <-tick.C:
		}
	}
}

// ready reports whether postmaster.pid belongs to pid and says "ready", or
// "standby" for a hot standby that accepts read-only connections (line 8,
// PM_STATUS, written since PostgreSQL 10; pg_ctl -w uses the same).
func ready(pidFile string, pid int) bool {
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return false
	}
	lines := strings.Split(string(b), "\n")
	if len(lines) < 8 || strings.TrimSpace(lines[0]) != strconv.Itoa(pid) {
		return false
	}
	s := strings.TrimSpace(lines[7])
	return s == "ready" || s == "standby"
}

// logSince returns the server log written since offset, trimmed to its last
// 4 KiB.
func (c *Cluster) logSince(offset int64) string {
	b, err := os.ReadFile(c.logPath)
	if err != nil {
		return "(no log: " + err.Error() + ")"
	}
	if offset >= 0 && offset <= int64(len(b)) {
		b = b[offset:]
	}
	if len(b) > 4096 {
		b = b[len(b)-4096:]
	}
	return strings.TrimSpace(string(b))
}

func (c *Cluster) initdb(ctx context.Context) error {
	cmd := exec.CommandContext(ctx, filepath.Join(c.binDir, "initdb"),
		"-D", c.dataDir,
		"-U", "postgres",
		"-A", "trust",
		"-E", "UTF8",
		"--locale=C",
		"--no-sync",
	)
	var out bytes.Buffer
	cmd.Stdout = &out
	cmd.Stderr = &out
	cmd.Dir = c.dir
	cmd.Env = cleanEnv()
	cmd.SysProcAttr = sysProcAttr(c.cred)
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("pgtemp: initdb: %v: %s", err, strings.TrimSpace(out.String()))
	}
	return nil
}

func serverArgs(dataDir, sockDir string, port int, opts Options) []string {
	conf := map[string]string{
		"listen_addresses":        "127.0.0.1",
		"port":                    strconv.Itoa(port),
		"unix_socket_directories": sockDir,
		"max_connections":         "200",
		// Tests of two-phase commit (the claim floor waits for a prepared
		// transaction that took seqs).
		"max_prepared_transactions": "10",
		"fsync":                     boolConf(opts.Fsync),
	}
	for k, v := range opts.ExtraConf {
		conf[k] = v
	}
	keys := make([]string, 0, len(conf))
	for k := range conf {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	args := []string{"-D", dataDir}
	for _, k := range keys {
		args = append(args, "-c", k+"="+conf[k])
	}
	return args
}

func boolConf(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// cleanEnv returns the environment without PG* variables, which could
// otherwise redirect initdb or the server (PGDATA, PGPORT, ...).
func cleanEnv() []string {
	var env []string
	for _, kv := range os.Environ() {
		if strings.HasPrefix(kv, "PG") {
			continue
		}
		env = append(env, kv)
	}
	return env
}

func sysProcAttr(cred *syscall.Credential) *syscall.SysProcAttr {
	a := &syscall.SysProcAttr{
		// Own process group: a terminal's Ctrl-C goes to the caller, which
		// then stops the server in order.
		Setpgid: true,
		// Do not outlive a caller that dies without calling Stop.
		Pdeathsig: syscall.SIGKILL,
	}
	if cred != nil {
		a.Credential = cred
	}
	return a
}

// credential returns the credential to run initdb and postgres with: nil
// when not root, else the "postgres" OS user's.
func credential() (*syscall.Credential, error) {
	if os.Geteuid() != 0 {
		return nil, nil
	}
	u, err := user.Lookup("postgres")
	if err != nil {
		return nil, fmt.Errorf("pgtemp: running as root needs an OS user \"postgres\" to run the server as: %w", err)
	}
	uid, err := strconv.ParseUint(u.Uid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: user postgres: uid %q: %w", u.Uid, err)
	}
	gid, err := strconv.ParseUint(u.Gid, 10, 32)
	if err != nil {
		return nil, fmt.Errorf("pgtemp: user postgres: gid %q: %w", u.Gid, err)
	}
	return &syscall.Credential{Uid: uint32(uid), Gid: uint32(gid)}, nil
}

func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("pgtemp: pick a free port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// debianGlob is Debian's (and Ubuntu's) layout for versioned server
// binaries, which are not on the PATH.
const debianGlob = "/usr/lib/postgresql/*/bin"

// FindBinDir returns the directory holding the PostgreSQL server binaries
// (initdb and postgres). It tries, in order: the PG_BINDIR environment
// variable, `pg_config --bindir`, the directory of initdb on the PATH, and
// /usr/lib/postgresql/<version>/bin with the highest numeric version. The
// error lists what was tried.
func FindBinDir() (string, error) {
	var tried []string
	if d := os.Getenv("PG_BINDIR"); d != "" {
		if hasServer(d) {
			return d, nil
		}
		return "", fmt.Errorf("pgtemp: PG_BINDIR=%s has no initdb and postgres", d)
	}
	tried = append(tried, "PG_BINDIR (unset)")
	if pgc, err := exec.LookPath("pg_config"); err == nil {
		out, err := exec.Command(pgc, "--bindir").Output()
		d := strings.TrimSpace(string(out))
		if err == nil && hasServer(d) {
			return d, nil
		}
		tried = append(tried, "pg_config --bindir ("+d+")")
	} else {
		tried = append(tried, "pg_config (not on PATH)")
	}
	if p, err := exec.LookPath("initdb"); err == nil {
		if d := filepath.Dir(p); hasServer(d) {
			return d, nil
		}
	}
	tried = append(tried, "initdb on PATH")
	matches, _ := filepath.Glob(debianGlob)
	sort.Slice(matches, func(i, j int) bool {
		return versionLess(filepath.Base(filepath.Dir(matches[i])), filepath.Base(filepath.Dir(matches[j])))
	})
	for i := len(matches) - 1; i >= 0; i-- {
		if hasServer(matches[i]) {
			return matches[i], nil
		}
	}
	tried = append(tried, debianGlob)
	return "", fmt.Errorf("pgtemp: PostgreSQL server binaries not found (tried %s); install them (e.g. apt-get install postgresql) or set PG_BINDIR",
		strings.Join(tried, ", "))
}

func hasServer(dir string) bool {
	for _, name := range []string{"initdb", "postgres"} {
		fi, err := os.Stat(filepath.Join(dir, name))
		if err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return false
		}
	}
	return true
}

// versionLess compares dotted numeric versions ("9.6" < "15" < "16.1");
// non-numeric parts compare as strings.
func versionLess(a, b string) bool {
	as, bs := strings.Split(a, "."), strings.Split(b, ".")
	for i := 0; i < len(as) && i < len(bs); i++ {
		ai, aerr := strconv.Atoi(as[i])
		bi, berr := strconv.Atoi(bs[i])
		if aerr == nil && berr == nil {
			if ai != bi {
				return ai < bi
			}
			continue
		}
		if as[i] != bs[i] {
			return as[i] < bs[i]
		}
	}
	return len(as) < len(bs)
}
