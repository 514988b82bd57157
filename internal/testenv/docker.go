package testenv

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
	"go.uber.org/goleak"
)

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

// startContainer runs postgres:15 with testcontainers-go and returns its
// connection string, a function that terminates it, and a goleak option
// ignoring the goroutines the Docker client and reaper started.
func startContainer(ctx context.Context) (dsn string, stop func() error, ignore []goleak.Option, err error) {
	defer func() {
		// testcontainers panics in some misconfigurations; report instead.
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	ctr, err := tcpostgres.Run(ctx, "postgres:15",
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithCmdArgs("-c", "max_connections=200"),
	)
	if err != nil {
		if ctr != nil {
			_ = testcontainers.TerminateContainer(ctr)
		}
		return "", nil, nil, err
	}
	dsn, err = ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		_ = testcontainers.TerminateContainer(ctr)
		return "", nil, nil, err
	}
	stop = func() error { return testcontainers.TerminateContainer(ctr) }
	ignore = []goleak.Option{
		goleak.IgnoreCurrent(),
		// Idle keep-alive connections of the Docker API client.
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
	}
	return dsn, stop, ignore, nil
}
