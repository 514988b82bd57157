package faultkit

import (
	"context"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/pgoutbox/outbox/internal/checker"
)

// Count runs a count query and returns its result.
func Count(t testing.TB, pool *pgxpool.Pool, sql string, args ...any) int {
	t.Helper()
	var n int
	if err := pool.QueryRow(context.Background(), sql, args...).Scan(&n); err != nil {
		t.Fatalf("%s: %v", sql, err)
	}
	return n
}

// Unpublished counts the outbox table's unpublished rows.
func Unpublished(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return Count(t, pool, "SELECT count(*) FROM outbox WHERE published_at IS NULL")
}

// Published counts the outbox table's published rows.
func Published(t testing.TB, pool *pgxpool.Pool) int {
	t.Helper()
	return Count(t, pool, "SELECT count(*) FROM outbox WHERE published_at IS NOT NULL")
}

// Wait polls cond until it is true or timeout passes, and reports which;
// for conditions whose failure the test reports itself and goes on.
func Wait(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	interval := 2 * time.Millisecond
	for !cond() {
		if time.Now().After(deadline) {
			return false
		}
		time.Sleep(interval)
		interval = min(2*interval, 50*time.Millisecond)
	}
	return true
}

// MatrixRow logs the fault matrix row of a test:
// FAULT | committed | delivered | lost | duplicates | order violations.
func MatrixRow(t testing.TB, fault string, r checker.Report) {
	t.Helper()
	t.Logf("matrix: %s | %d | %d | %d | %d | %d", fault, r.Committed, r.Delivered, r.Lost, r.Duplicates, r.OrderViolations)
}

// CheckTopic reads the topic until every event of the table was seen (or
// timeout), runs the checker against the table and fails the test unless
// the report is OK. It logs the matrix row for fault and returns the
// report.
func CheckTopic(t testing.TB, pool *pgxpool.Pool, brokers []string, topic, fault string, timeout time.Duration) checker.Report {
	t.Helper()
	ctx := context.Background()
	exp, err := checker.ExpectedFromTable(ctx, pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	obs, err := checker.ObserveTopic(ctx, brokers, topic, len(exp), timeout)
	if err != nil {
		t.Fatal(err)
	}
	r := checker.Check(exp, obs)
	MatrixRow(t, fault, r)
	if !r.OK() {
		t.Errorf("checker: %v", r)
	}
	return r
}
