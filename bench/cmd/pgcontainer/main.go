// Command pgcontainer runs PostgreSQL in a Docker container with
// testcontainers-go until it is told to stop: the tests' database on a
// machine with Docker and no PostgreSQL server binaries (internal/testenv
// starts it when Docker answers; OUTBOX_TEST_PG=docker insists on it).
//
// Its first line on stdout is
//
//	DATABASE_URL=postgres://postgres:postgres@HOST:PORT/postgres?sslmode=disable
//
// and nothing else is written to stdout; diagnostics go to stderr. It
// terminates the container on SIGINT or SIGTERM, or when stdin reaches end
// of file (so a parent that dies, closing the pipe, takes the container
// with it; testcontainers' reaper removes it too if this process is
// killed).
//
// Usage:
//
//	pgcontainer [-image postgres:15] [-max-connections 200]
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"strconv"
	"syscall"
	"time"

	"github.com/testcontainers/testcontainers-go"
	tcpostgres "github.com/testcontainers/testcontainers-go/modules/postgres"
)

func main() {
	image := flag.String("image", "postgres:15", "PostgreSQL image")
	maxConns := flag.Int("max-connections", 200, "the server's max_connections (the suite opens many pools at once)")
	flag.Parse()
	if err := run(*image, *maxConns); err != nil {
		fmt.Fprintln(os.Stderr, "pgcontainer:", err)
		os.Exit(1)
	}
}

func run(image string, maxConns int) (err error) {
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		cancel()
	}()
	defer func() {
		// testcontainers panics in some misconfigurations; report instead.
		if r := recover(); r != nil {
			err = fmt.Errorf("panic: %v", r)
		}
	}()
	ctr, err := tcpostgres.Run(ctx, image,
		tcpostgres.WithDatabase("postgres"),
		tcpostgres.WithUsername("postgres"),
		tcpostgres.WithPassword("postgres"),
		tcpostgres.BasicWaitStrategies(),
		testcontainers.WithCmdArgs("-c", "max_connections="+strconv.Itoa(maxConns)),
	)
	if ctr != nil {
		defer func() {
			stopCtx, stop := context.WithTimeout(context.Background(), time.Minute)
			defer stop()
			_ = testcontainers.TerminateContainer(ctr, testcontainers.StopContext(stopCtx))
		}()
	}
	if err != nil {
		return fmt.Errorf("start %s: %w", image, err)
	}
	dsn, err := ctr.ConnectionString(ctx, "sslmode=disable")
	if err != nil {
		return fmt.Errorf("connection string: %w", err)
	}
	fmt.Printf("DATABASE_URL=%s\n", dsn)
	<-ctx.Done()
	return nil
}
