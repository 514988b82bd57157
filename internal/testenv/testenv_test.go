package testenv

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/twmb/franz-go/pkg/kgo"
)

func TestMain(m *testing.M) { Main(m) }

func TestDBIsolatedSchemas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	a, b := DB(t), DB(t)
	if a.Schema == b.Schema || !strings.HasPrefix(a.Schema, "test_") {
		t.Fatalf("schemas %q, %q", a.Schema, b.Schema)
	}
	if _, err := a.Pool.Exec(ctx, "CREATE TABLE t (x int)"); err != nil {
		t.Fatal(err)
	}
	var where string
	if err := a.Pool.QueryRow(ctx, "SELECT table_schema FROM information_schema.tables WHERE table_name = 't'").Scan(&where); err != nil {
		t.Fatal(err)
	}
	if where != a.Schema {
		t.Fatalf("table created in %q, want %q", where, a.Schema)
	}
	if _, err := b.Pool.Exec(ctx, "SELECT * FROM t"); err == nil {
		t.Fatal("schema b sees schema a's table")
	}

	// A separate connection from ConnString lands in the same schema.
	conn, err := pgx.Connect(ctx, a.ConnString)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close(ctx)
	var sp string
	if err := conn.QueryRow(ctx, "SELECT current_schema()").Scan(&sp); err != nil || sp != a.Schema {
		t.Fatalf("current_schema() = %q, %v; want %q", sp, err, a.Schema)
	}
}

func TestDBDroppedOnCleanup(t *testing.T) {
	t.Parallel()
	var schema string
	t.Run("inner", func(t *testing.T) {
		schema = DB(t).Schema
	})
	check := DB(t)
	var n int
	if err := check.Pool.QueryRow(context.Background(),
		"SELECT count(*) FROM pg_namespace WHERE nspname = $1", schema).Scan(&n); err != nil {
		t.Fatal(err)
	}
	if n != 0 {
		t.Fatalf("schema %s not dropped", schema)
	}
}

func TestMigratedDB(t *testing.T) {
	for i := 0; i < 3; i++ {
		t.Run(fmt.Sprint(i), func(t *testing.T) {
			t.Parallel()
			db := MigratedDB(t)
			var reg *string
			if err := db.Pool.QueryRow(context.Background(), "SELECT to_regclass($1)::text", db.Schema+".outbox").Scan(&reg); err != nil {
				t.Fatal(err)
			}
			if reg == nil {
				t.Fatal("outbox table missing")
			}
			if _, err := db.Pool.Exec(context.Background(), "SELECT seq, id, aggregate_id, event_type, payload FROM outbox"); err != nil {
				t.Fatal(err)
			}
		})
	}
}

func TestWithSearchPath(t *testing.T) {
	got, err := withSearchPath("postgres://u@127.0.0.1:5/db?sslmode=disable", "test_x")
	if err != nil || got != "postgres://u@127.0.0.1:5/db?search_path=test_x&sslmode=disable" {
		t.Fatalf("url: %q, %v", got, err)
	}
	got, _ = withSearchPath("host=127.0.0.1 port=5", "test_x")
	if got != "host=127.0.0.1 port=5 search_path=test_x" {
		t.Fatalf("kv: %q", got)
	}
}

func TestTopicName(t *testing.T) {
	n := topicName("TestX/sub_test#01 ü")
	if !strings.HasPrefix(n, "t-TestX-sub-test-01---") {
		t.Fatalf("topic %q", n)
	}
	if len(topicName(strings.Repeat("x", 400))) > 249 {
		t.Fatal("too long")
	}
}

func TestKafkaRoundTrip(t *testing.T) {
	t.Parallel()
	k := Kafka(t)
	topic := k.Topic(t, 3)

	ctx := context.Background()
	cl := k.Client(t, kgo.DefaultProduceTopic(topic))
	var recs []*kgo.Record
	for i := 0; i < 10; i++ {
		recs = append(recs, &kgo.Record{
			Key:     []byte(fmt.Sprintf("k%d", i)),
			Value:   []byte(fmt.Sprintf("v%d", i)),
			Headers: []kgo.RecordHeader{{Key: "h", Value: []byte(fmt.Sprint(i))}},
		})
	}
	if err := cl.ProduceSync(ctx, recs...).FirstErr(); err != nil {
		t.Fatal(err)
	}

	got := k.Consume(t, topic, 10, 20*time.Second)
	if len(got) != 10 {
		t.Fatalf("consumed %d records, want 10", len(got))
	}
	seen := map[string]bool{}
	for _, r := range got {
		if r.Topic != topic || r.Partition < 0 || r.Partition > 2 || r.Timestamp.IsZero() {
			t.Fatalf("bad record %+v", r)
		}
		want := "v" + strings.TrimPrefix(string(r.Key), "k")
		if string(r.Value) != want || r.Headers["h"] != strings.TrimPrefix(string(r.Key), "k") {
			t.Fatalf("record %+v", r)
		}
		seen[string(r.Key)] = true
	}
	if len(seen) != 10 {
		t.Fatalf("distinct keys %d", len(seen))
	}

	// Streaming: a record produced after the consumer started arrives.
	c := k.Consumer(t, topic)
	for i := 0; i < 10; i++ {
		if _, err := c.Next(ctx); err != nil {
			t.Fatal(err)
		}
	}
	go func() {
		_ = cl.ProduceSync(context.Background(), &kgo.Record{Key: []byte("late"), Value: []byte("x")})
	}()
	nctx, cancel := context.WithTimeout(ctx, 20*time.Second)
	defer cancel()
	r, err := c.Next(nctx)
	if err != nil || string(r.Key) != "late" {
		t.Fatalf("late record: %+v, %v", r, err)
	}
	c.Close()
	if _, err := c.Next(ctx); err == nil {
		t.Fatal("Next after Close succeeded")
	}
}

func TestKafkaConsumeTimeout(t *testing.T) {
	t.Parallel()
	k := Kafka(t)
	topic := k.Topic(t, 1)
	start := time.Now()
	if got := k.Consume(t, topic, 1, 300*time.Millisecond); len(got) != 0 {
		t.Fatalf("got %d records from an empty topic", len(got))
	}
	if d := time.Since(start); d > 5*time.Second {
		t.Fatalf("Consume took %s", d)
	}
}

func TestEventually(t *testing.T) {
	var n atomic.Int32
	go func() {
		for i := 0; i < 5; i++ {
			time.Sleep(time.Millisecond)
			n.Add(1)
		}
	}()
	Eventually(t, 5*time.Second, func() bool { return n.Load() == 5 }, "n = %d", n.Load())

	ft := &fakeTB{TB: t}
	func() {
		defer func() { _ = recover() }()
		Eventually(ft, 20*time.Millisecond, func() bool { return false }, "never %s", "true")
	}()
	if !strings.Contains(ft.msg, "never true") {
		t.Fatalf("message %q", ft.msg)
	}
}

type fakeTB struct {
	testing.TB
	msg string
}

func (f *fakeTB) Helper() {}
func (f *fakeTB) Fatalf(format string, args ...any) {
	f.msg = fmt.Sprintf(format, args...)
	panic("fatal")
}

func TestLogger(t *testing.T) {
	Logger(t).Debug("hello from testenv")
}

// RefusedAddr's port refuses connections and cannot be bound by anyone
// else while the test runs.
func TestRefusedAddr(t *testing.T) {
	addr := RefusedAddr(t)
	for range 3 {
		c, err := net.DialTimeout("tcp", addr, 5*time.Second)
		if err == nil {
			_ = c.Close()
			t.Fatalf("dial %s succeeded", addr)
		}
		if !errors.Is(err, syscall.ECONNREFUSED) {
			t.Fatalf("dial %s: %v, want connection refused", addr, err)
		}
	}
	if ln, err := net.Listen("tcp", addr); err == nil {
		_ = ln.Close()
		t.Fatalf("listen on %s succeeded while RefusedAddr holds it", addr)
	}
}

// TestModuleRootFindsThePgcontainerCommand checks the path the Docker mode
// builds its PostgreSQL container command from.
func TestModuleRootFindsThePgcontainerCommand(t *testing.T) {
	root, err := moduleRoot()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := os.Stat(filepath.Join(root, "bench", "cmd", "pgcontainer", "main.go")); err != nil {
		t.Fatalf("moduleRoot() = %s, which has no bench/cmd/pgcontainer: %v", root, err)
	}
}
