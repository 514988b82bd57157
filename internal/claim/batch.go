package claim

import (
	"context"
	"fmt"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgconn"
	"github.com/jackc/pgx/v5/pgxpool"
)

// step is one statement of a batch and how its result is read.
type step struct {
	sql  string
	args []any
	read func(pgx.BatchResults) error // reads exactly this statement's result
}

// steps are the statements of one batch, queued and read back from this
// one list, so that a result is always read by its own statement's step.
type steps []step

// add appends a statement whose result read reads.
func (s *steps) add(sql string, args []any, read func(pgx.BatchResults) error) {
	*s = append(*s, step{sql: sql, args: args, read: read})
}

// exec appends a statement whose command tag goes to tag (nil: dropped);
// its error is wrapped as "<wrap>: ..." (wrap "": as it is).
func (s *steps) exec(sql string, args []any, wrap string, tag func(pgconn.CommandTag)) {
	s.add(sql, args, func(br pgx.BatchResults) error {
		t, err := br.Exec()
		if err != nil {
			return wrapErr(wrap, err)
		}
		if tag != nil {
			tag(t)
		}
		return nil
	})
}

// scan appends a statement of one row scanned into dest; its error is
// wrapped as "<wrap>: ...".
func (s *steps) scan(sql string, args []any, wrap string, dest ...any) {
	s.add(sql, args, func(br pgx.BatchResults) error {
		return wrapErr(wrap, br.QueryRow().Scan(dest...))
	})
}

// send runs the steps as one batch on pool: one implicit transaction,
// which commits when the batch completes, in one round trip. It reads the
// results in order and returns the first step's error, or the batch's
// own (its commit) wrapped as "<commit>: ...".
func (s steps) send(ctx context.Context, pool *pgxpool.Pool, commit string) error {
	b := &pgx.Batch{}
	for _, st := range s {
		b.Queue(st.sql, st.args...)
	}
	br := pool.SendBatch(ctx, b)
	// Closed exactly once: the pool's Close releases the connection, and a
	// second Close after a failed batch would still invalidate that
	// connection's statement cache, while another goroutine uses it.
	closed := false
	defer func() {
		if !closed {
			_ = br.Close()
		}
	}()
	for _, st := range s {
		if err := st.read(br); err != nil {
			closed = true
			_ = br.Close()
			return err
		}
	}
	closed = true
	return wrapErr(commit, br.Close())
}

// wrapErr returns err wrapped as "<wrap>: ..." (wrap "": err itself); nil
// for nil.
func wrapErr(wrap string, err error) error {
	if err == nil || wrap == "" {
		return err
	}
	return fmt.Errorf("%s: %w", wrap, err)
}
