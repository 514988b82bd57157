package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// buildTimeout bounds building bench/cmd/pgcontainer.
const buildTimeout = 10 * time.Minute

// dockerPingTimeout bounds the Docker reachability check.
const dockerPingTimeout = 2 * time.Second

// dockerPing reports whether a Docker daemon answers GET /_ping on
// DOCKER_HOST (unix:// or tcp://) or, when that is unset, on one of the
// usual unix sockets. It never waits more than about 2 seconds in all.
func dockerPing(ctx context.Context) error {
	ctx, cancel := context.WithTimeout(ctx, dockerPingTimeout)
	defer cancel()
	type endpoint struct{ network, addr string }
	var eps []endpoint
	if h := os.Getenv("DOCKER_HOST"); h != "" {
		u, err := url.Parse(h)
		if err != nil {
			return fmt.Errorf("DOCKER_HOST=%q: %w", h, err)
		}
		switch u.Scheme {
		case "unix":
			eps = append(eps, endpoint{"unix", u.Path})
		case "tcp":
			eps = append(eps, endpoint{"tcp", u.Host})
		default:
			return fmt.Errorf("DOCKER_HOST=%q: scheme %q not supported by the ping", h, u.Scheme)
		}
	} else {
		socks := []string{"/var/run/docker.sock"}
		if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" {
			socks = append(socks, filepath.Join(d, "docker.sock"))
		}
		if home, err := os.UserHomeDir(); err == nil {
			socks = append(socks,
				filepath.Join(home, ".docker", "run", "docker.sock"),
				filepath.Join(home, ".docker", "desktop", "docker.sock"))
		}
		for _, s := range socks {
			if _, err := os.Stat(s); err == nil {
				eps = append(eps, endpoint{"unix", s})
			}
		}
	}
	if len(eps) == 0 {
		return errors.New("no Docker socket found")
	}
	var errs []error
	for _, ep := range eps {
		err := pingOne(ctx, ep.network, ep.addr)
		if err == nil {
			return nil
		}
		errs = append(errs, fmt.Errorf("%s %s: %w", ep.network, ep.addr, err))
	}
	return errors.Join(errs...)
}

func pingOne(ctx context.Context, network, addr string) error {
	var d net.Dialer
	conn, err := d.DialContext(ctx, network, addr)
	if err != nil {
		return err
	}
	defer conn.Close()
	if dl, ok := ctx.Deadline(); ok {
		_ = conn.SetDeadline(dl)
	}
	if _, err := fmt.Fprint(conn, "GET /_ping HTTP/1.0\r\nHost: docker\r\n\r\n"); err != nil {
		return err
	}
	status, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		return err
	}
	if f := strings.Fields(status); len(f) < 2 || f[1] != "200" {
		return fmt.Errorf("ping: %q", strings.TrimSpace(status))
	}
	return nil
}

// startContainer builds and starts bench/cmd/pgcontainer (PostgreSQL in
// Docker with testcontainers-go; the tooling module holds it, so that the
// library's module graph has no Docker client) and returns its connection
// string and a function that stops it. The first run may pull the image.
func startContainer(ctx context.Context) (dsn string, stop func() error, err error) {
	root, err := moduleRoot()
	if err != nil {
		return "", nil, err
	}
	dir, err := os.MkdirTemp("", "pgcontainer-")
	if err != nil {
		return "", nil, err
	}
	bin := filepath.Join(dir, "pgcontainer")
	// The build has a bound of its own: on a fresh machine it downloads
	// and compiles the Docker client first, which setupTimeout does not
	// allow for.
	bctx, cancel := context.WithTimeout(context.Background(), buildTimeout)
	defer cancel()
	build := exec.CommandContext(bctx, "go", "-C", filepath.Join(root, "bench"), "build", "-o", bin, "./cmd/pgcontainer")
	if out, err := build.CombinedOutput(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, fmt.Errorf("go build bench/cmd/pgcontainer: %w\n%s", err, out)
	}
	cmd := exec.Command(bin)
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	if err := cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return "", nil, err
	}
	stop = func() error {
		_ = in.Close() // pgcontainer terminates the container at EOF
		err := cmd.Wait()
		_ = os.RemoveAll(dir)
		return err
	}
	line := make(chan string, 1)
	go func() {
		l, _ := bufio.NewReader(out).ReadString('\n')
		line <- l
		_, _ = io.Copy(io.Discard, out)
	}()
	select {
	case l := <-line:
		if v, ok := strings.CutPrefix(strings.TrimSpace(l), "DATABASE_URL="); ok {
			return v, stop, nil
		}
		_ = stop()
		return "", nil, errors.New("pgcontainer exited without printing DATABASE_URL (its output is above)")
	case <-ctx.Done():
		_ = cmd.Process.Kill()
		_ = stop()
		return "", nil, fmt.Errorf("pgcontainer: no DATABASE_URL before the set-up deadline: %w", ctx.Err())
	}
}

// moduleRoot returns the directory of the library's go.mod, the nearest
// one above the working directory (a test runs in its package's
// directory).
func moduleRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for {
		b, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		if err == nil && strings.HasPrefix(string(b), "module github.com/pgoutbox/outbox\n") {
			return dir, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			return "", errors.New("the pgoutbox module's go.mod is not above the working directory")
		}
		dir = parent
	}
}
