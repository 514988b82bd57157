package main

import (
	"bytes"
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/sqlname"
	"github.com/pgoutbox/outbox/internal/testenv"
)

// Tables and columns whose names PostgreSQL accepts but that are awkward
// to build SQL from are adopted and relayed: a table name of 63 bytes (the
// longest identifier; "<name>_order_guard" cut to 63 bytes is the table
// itself), two of 62 bytes sharing their first 51 (their cut guards would
// be one table), and names holding '%', "$f$" or "$adopt$", which once
// went into adopt's format() strings and dollar quotes unescaped. Each
// table gets its own order guard, and every event is published with its
// key. Each has its primary key and the four indexes adopt adds.
func TestAdoptAndRelayOddTableNames(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	k := testenv.Kafka(t)
	cases := []struct{ table, aggregate string }{
		{strings.Repeat("a", 63), "aggregateid"},
		{strings.Repeat("b", 51) + "_one_events", "aggregateid"},
		{strings.Repeat("b", 51) + "_two_events", "aggregateid"},
		{"pct%s%%table", "agg%s%%id"},
		{"dollar$f$adopt$adopt$x", "agg$f$id"},
	}
	guards := map[string]string{}
	for i, c := range cases {
		table, agg := pgx.Identifier{c.table}.Sanitize(), pgx.Identifier{c.aggregate}.Sanitize()
		if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id uuid PRIMARY KEY, aggregatetype varchar(255) NOT NULL, `+
			agg+` varchar(255) NOT NULL, type varchar(255) NOT NULL, payload jsonb)`); err != nil {
			t.Fatal(err)
		}
		for round := 0; round < 2; round++ {
			if code, out, stderr := runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", c.table,
				"--column-aggregate-id", c.aggregate); code != 0 || !strings.Contains(out, "ready") {
				t.Fatalf("adopt %q (round %d): exit %d %q %q", c.table, round+1, code, out, stderr)
			}
		}
		// The order guard is a table of its own, (key, until), not
		// shared with another outbox table.
		var guard string
		var columns []string
		if err := db.Pool.QueryRow(ctx, `SELECT g::text, (SELECT array_agg(attname::text ORDER BY attnum) FROM pg_attribute WHERE attrelid = g AND attnum > 0)
			FROM to_regclass($1) g`, sqlname.OrderGuard(db.Schema+"."+c.table)).Scan(&guard, &columns); err != nil {
			t.Fatalf("order guard of %q: %v", c.table, err)
		}
		if fmt.Sprint(columns) != "[key until]" {
			t.Fatalf("the order guard %s of %q has the columns %v, want [key until]", guard, c.table, columns)
		}
		// Its own four indexes besides the primary key (cut by the
		// server, a long name's were one, or the table's own name, and
		// skipped).
		var indexes int
		if err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM pg_index WHERE indrelid = to_regclass($1)`, table).Scan(&indexes); err != nil || indexes != 5 {
			t.Fatalf("%q has %d indexes, want 5 (%v)", c.table, indexes, err)
		}
		if other, ok := guards[guard]; ok && other != c.table {
			t.Fatalf("%q and %q share the order guard %q", other, c.table, guard)
		}
		guards[guard] = c.table
		for j := 0; j < 3; j++ {
			if _, err := db.Pool.Exec(ctx, `INSERT INTO `+table+` (id, aggregatetype, `+agg+`, type, payload) VALUES ($1, 'Order', $2, 'Created', '{}')`,
				uuid.New(), fmt.Sprintf("agg-%d", i)); err != nil {
				t.Fatalf("insert into %q: %v", c.table, err)
			}
		}
	}
	topic := "odd-names-" + uuid.NewString()[:8]
	for _, c := range cases {
		rctx, cancel := context.WithCancel(ctx)
		done := make(chan int, 1)
		var stderr bytes.Buffer
		go func() {
			var stdout bytes.Buffer
			done <- Main(rctx, []string{"run", "--database-url", db.ConnString, "--brokers", k.Brokers[0],
				"--table", c.table, "--column-aggregate-id", c.aggregate, "--column-event-type", "type", "--topic", topic, "--kafka-auto-create-topics",
				"--metrics-addr", "", "--startup-wait", "10s", "--log-level", "warn"}, &stdout, &stderr)
		}()
		published := func() bool {
			var n int
			err := db.Pool.QueryRow(ctx, `SELECT count(*) FROM `+pgx.Identifier{c.table}.Sanitize()+` WHERE published_at IS NULL`).Scan(&n)
			return err == nil && n == 0
		}
		for deadline := time.Now().Add(20 * time.Second); !published(); time.Sleep(10 * time.Millisecond) {
			if time.Now().After(deadline) {
				cancel()
				<-done
				t.Fatalf("events of %q unpublished after 20 s; the relay said:\n%s", c.table, stderr.String())
			}
		}
		cancel()
		if code := <-done; code != 0 {
			t.Fatalf("run on %q: exit %d: %s", c.table, code, stderr.String())
		}
		if strings.Contains(stderr.String(), "error") {
			t.Errorf("run on %q logged an error: %s", c.table, stderr.String())
		}
	}
	recs := k.Consume(t, topic, 3*len(cases), 20*time.Second)
	keys := map[string]int{}
	for _, r := range recs {
		keys[string(r.Key)]++
	}
	for i := range cases {
		if n := keys[fmt.Sprintf("agg-%d", i)]; n != 3 {
			t.Errorf("key agg-%d: %d records, want 3 (%v)", i, n, keys)
		}
	}
}

// A table whose order guard is missing (adopted by a version that named
// the guard of a long table name otherwise) is refused at start, naming
// the guard and the command that creates it; adopt again mends it.
func TestRunRefusesATableWithoutItsOrderGuard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	table := strings.Repeat("g", 55)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE `+table+` (id uuid PRIMARY KEY, aggregate_id text NOT NULL, event_type text NOT NULL, payload jsonb)`); err != nil {
		t.Fatal(err)
	}
	adopt := func() {
		t.Helper()
		if code, out, stderr := runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", table); code != 0 {
			t.Fatalf("adopt: exit %d %q %q", code, out, stderr)
		}
	}
	adopt()
	if _, err := db.Pool.Exec(ctx, `DROP TABLE `+sqlname.OrderGuard(db.Schema+"."+table)); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString, "--table", table)
	if code == 0 || !strings.Contains(stderr, "has no order guard") || !strings.Contains(stderr, "outbox-relay adopt") {
		t.Fatalf("status without the order guard: exit %d, stderr %q; want a refusal naming the guard and adopt", code, stderr)
	}
	adopt()
	if code, out, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString, "--table", table); code != 0 {
		t.Fatalf("status after adopting again: exit %d %q %q", code, out, stderr)
	}
}
