package sqladmin_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/pgoutbox/outbox/internal/sqladmin"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

// After ALTER SEQUENCE ... RESTART (a logical-replication cutover does not
// carry sequences over), new events get seqs below published ones and wait
// for the relay's rescan. Inspect reports it with the setval that fixes it.
func TestInspectReportsASequenceBehindTheTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload) SELECT gen_random_uuid(), 'a', 't', '{}' FROM generate_series(1, 5)`); err != nil {
		t.Fatal(err)
	}
	r, err := sqladmin.Inspect(ctx, db.Pool, "outbox")
	if err != nil {
		t.Fatal(err)
	}
	if len(r.Problems()) != 0 || r.MaxSeq != 5 || r.SequenceNext != 6 {
		t.Fatalf("healthy table: %+v, problems %v", r, r.Problems())
	}
	if _, err := db.Pool.Exec(ctx, `ALTER SEQUENCE outbox_seq_seq RESTART WITH 1`); err != nil {
		t.Fatal(err)
	}
	if r, err = sqladmin.Inspect(ctx, db.Pool, "outbox"); err != nil {
		t.Fatal(err)
	}
	var be *sqladmin.SequenceBehindError
	if ps := r.Problems(); len(ps) != 1 || !errors.As(ps[0], &be) || be.Next != 1 || be.MaxSeq != 5 {
		t.Fatalf("problems %v; want one *SequenceBehindError, next 1 below 5", ps)
	}
	fix := "SELECT setval(pg_get_serial_sequence('outbox','seq'), 5)"
	if be.Fix() != fix || !strings.Contains(be.Error(), fix) {
		t.Fatalf("fix %q in %q; want %q", be.Fix(), be.Error(), fix)
	}
	t.Log(be)
	if _, err := db.Pool.Exec(ctx, fix); err != nil {
		t.Fatal(err)
	}
	if r, err = sqladmin.Inspect(ctx, db.Pool, "outbox"); err != nil || len(r.Problems()) != 0 || r.SequenceNext != 6 {
		t.Fatalf("after the fix: %+v %v", r, err)
	}
}

// An index on the seq column depends on the column in pg_depend as an
// owned sequence does (deptype 'a'). The seq sequence is the sequence
// only: a table whose seq column has an index and no sequence has none,
// and one given a sequence later (after the index) has that one. The
// index was once taken for the sequence when the catalog listed it first,
// and Inspect failed with "... is an index".
func TestSequenceOfIsNeverAnIndex(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE ev (id uuid PRIMARY KEY, seq bigint NOT NULL);
		CREATE INDEX ev_seq_idx ON ev (seq)`); err != nil {
		t.Fatal(err)
	}
	if seq, err := sqladmin.SequenceOf(ctx, db.Pool, "ev"); err != nil || seq != "" {
		t.Fatalf("SequenceOf a table without a seq sequence: %q %v; want \"\"", seq, err)
	}
	if r, err := sqladmin.Inspect(ctx, db.Pool, "ev"); err != nil || r.Sequence != "" {
		t.Fatalf("Inspect a table without a seq sequence: %+v %v", r, err)
	}
	if _, err := db.Pool.Exec(ctx, `CREATE SEQUENCE ev_seq OWNED BY ev.seq`); err != nil {
		t.Fatal(err)
	}
	if seq, err := sqladmin.SequenceOf(ctx, db.Pool, "ev"); err != nil || seq != "ev_seq" {
		t.Fatalf("SequenceOf: %q %v; want ev_seq", seq, err)
	}
	if r, err := sqladmin.Inspect(ctx, db.Pool, "ev"); err != nil || r.Sequence != "ev_seq" {
		t.Fatalf("Inspect: %+v %v; want the sequence ev_seq", r, err)
	}
}
