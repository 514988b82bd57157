package main

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/uuid"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/leasetest"
	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// seedStates inserts one table with every state: 2 published, 3
// claimable (one of them 2 minutes old, the oldest), 2 leased by relay-a and
// 1 by relay-b, 1 backing off, 1 dead letter. It returns the IDs by name.
func seedStates(t *testing.T, db *testenv.TestDB) map[string]uuid.UUID {
	t.Helper()
	ids := map[string]uuid.UUID{}
	for _, n := range []string{"pub1", "pub2", "old", "c2", "c3", "la1", "la2", "lb1", "backoff", "dead"} {
		ids[n] = uuid.New()
	}
	// One statement (the extended protocol takes one), all columns.
	_, err := db.Pool.Exec(context.Background(), `
INSERT INTO outbox (id, aggregate_id, event_type, payload, topic, created_at, published_at, locked_by, locked_until, claim_token, attempts, last_error, dead_lettered_at)
VALUES ($1, 'p1', 'payment.captured', '{}', 'payments', now() - interval '1 hour', now() - interval '1 hour' + interval '12 milliseconds', NULL, NULL, NULL, 0, NULL, NULL),
       ($2, 'p2', 'payment.captured', '{}', NULL, now() - interval '30 minutes', now() - interval '30 minutes', NULL, NULL, NULL, 0, NULL, NULL),
       ($3, 'o', 'old.one', '{}', NULL, now() - interval '2 minutes', NULL, NULL, NULL, NULL, 0, NULL, NULL),
       ($4, 'c2', 't', '{}', NULL, now(), NULL, NULL, NULL, NULL, 0, NULL, NULL),
       ($5, 'c3', 't', '{}', NULL, now(), NULL, NULL, NULL, NULL, 0, NULL, NULL),
       ($6, 'la1', 't', '{}', NULL, now(), NULL, 'relay-a/1234', now() + interval '20 seconds', gen_random_uuid(), 0, NULL, NULL),
       ($7, 'la2', 't', '{}', NULL, now(), NULL, 'relay-a/1234', now() + interval '25 seconds', gen_random_uuid(), 0, NULL, NULL),
       ($8, 'lb1', 't', '{}', NULL, now(), NULL, 'relay-b/5678', now() + interval '10 seconds', gen_random_uuid(), 0, NULL, NULL),
       ($9, 'bo', 'order.created', '{}', NULL, now(), NULL, NULL, now() + interval '30 seconds', NULL, 2, 'kafka: NOT_LEADER_FOR_PARTITION', NULL),
       ($10, 'dl', 'big.event', '{}', 'payments', now(), NULL, NULL, 'infinity', NULL, 1, 'MESSAGE_TOO_LARGE', now())`,
		ids["pub1"], ids["pub2"], ids["old"], ids["c2"], ids["c3"], ids["la1"], ids["la2"], ids["lb1"], ids["backoff"], ids["dead"])
	if err != nil {
		t.Fatal(err)
	}
	return ids
}

func TestStatus(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	ids := seedStates(t, db)

	code, out, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString, "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d %s", code, stderr)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	u := r.Unpublished
	if u.Total != 7 || u.Claimable != 3 || u.Held != 0 || u.Leased != 3 || u.BackingOff != 1 || r.DeadLetters != 1 || r.Published != 2 {
		t.Fatalf("counts %+v dead %d published %d; want total 7 = 3 claimable + 3 leased + 1 backing off, 1 dead, 2 published\n%s",
			u, r.DeadLetters, r.Published, out)
	}
	if r.OldestUnpublishedAgeSeconds < 120 || r.OldestUnpublishedAgeSeconds > 180 || r.OldestUnpublishedEventID == nil || *r.OldestUnpublishedEventID != ids["old"].String() {
		t.Fatalf("oldest unpublished: %v s, %v; want about 120 s, %s", r.OldestUnpublishedAgeSeconds, r.OldestUnpublishedEventID, ids["old"])
	}
	if len(r.Relays) != 2 || r.Relays[0].RelayID != "relay-a/1234" || r.Relays[0].Leased != 2 || r.Relays[1].RelayID != "relay-b/5678" || r.Relays[1].Leased != 1 {
		t.Fatalf("relays %+v", r.Relays)
	}
	if d := r.Relays[0].LeaseEndsAt.Sub(r.CheckedAt).Seconds(); d < 15 || d > 26 {
		t.Fatalf("relay-a's lease ends in %vs, want 25s (its latest lease)", d)
	}
	// The raw JSON has the documented snake_case keys.
	for _, k := range []string{`"oldest_unpublished_age_seconds"`, `"claimable": 3`, `"backing_off": 1`, `"dead_letters": 1`, `"relay_id": "relay-b/5678"`, `"lease_ends_at"`} {
		if !strings.Contains(out, k) {
			t.Errorf("JSON lacks %s:\n%s", k, out)
		}
	}

	code, out, stderr = runMain(t, ctx, "status", "--database-url", db.ConnString)
	if code != 0 {
		t.Fatalf("status: exit %d %s", code, stderr)
	}
	for _, re := range []string{
		// Seeded 2 minutes old; a loaded machine may take a few seconds
		// to get here.
		`oldest unpublished event: 2m[0-9](\.\d+)?s old \(event_id ` + ids["old"].String(),
		`(?m)^unpublished +7 +not dead-lettered$`,
		`(?m)^  claimable +3 +the next claim`,
		`(?m)^  held back +0 +waits behind`,
		`(?m)^  leased +3 +held`,
		`(?m)^  backing off +1 +failed`,
		`(?m)^dead letters +1 +see .outbox-relay inspect`,
		`(?m)^published \(kept\) +2 +published from `,
		`(?m)^  relay-a/1234 +2 +\S+ \S+ \(in 2[0-5]\.\d+s\)$`,
		`(?m)^  relay-b/5678 +1 +`,
	} {
		if !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("status output does not match %s:\n%s", re, out)
		}
	}
}

func TestStatusOfAnEmptyTable(t *testing.T) {
	t.Parallel()
	db := testenv.MigratedDB(t)
	code, out, stderr := runMain(t, context.Background(), "status", "--database-url", db.ConnString)
	if code != 0 || !strings.Contains(out, "oldest unpublished event: none") || !strings.Contains(out, "relays holding leases: none") {
		t.Fatalf("exit %d\n%s\n%s", code, out, stderr)
	}
	code, out, _ = runMain(t, context.Background(), "status", "--database-url", db.ConnString, "--json")
	if code != 0 || !strings.Contains(out, `"oldest_unpublished_age_seconds": 0,`) || !strings.Contains(out, `"relays": []`) || !strings.Contains(out, `"oldest_unpublished_event_id": null`) {
		t.Fatalf("exit %d\n%s", code, out)
	}
}

func TestStatusWithoutTableSaysToMigrate(t *testing.T) {
	t.Parallel()
	db := testenv.DB(t)
	code, _, stderr := runMain(t, context.Background(), "status", "--database-url", db.ConnString)
	if code != exitFailure || !strings.Contains(stderr, "outbox-relay migrate") {
		t.Fatalf("exit %d %s", code, stderr)
	}
}

func TestInspect(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	seeded := time.Now() // the backing-off row's lease ends 30 s after its insert, which follows
	ids := seedStates(t, db)
	inspect := func(id uuid.UUID, args ...string) (int, string, string) {
		return runMain(t, ctx, append([]string{"inspect", "--database-url", db.ConnString, "--event-id", id.String()}, args...)...)
	}

	// Published: JSON.
	code, out, stderr := inspect(ids["pub1"], "--json")
	if code != 0 {
		t.Fatalf("exit %d %s", code, stderr)
	}
	var r eventReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatal(err)
	}
	if !r.Found || !r.Published || r.State != "published" || r.Topic == nil || *r.Topic != "payments" || r.AggregateID != "p1" ||
		r.EventType != "payment.captured" || r.PublishedAt == nil || r.PublishedAt.Sub(*r.CreatedAt).Milliseconds() != 12 ||
		r.Attempts != 0 || r.LastError != nil || r.DeadLetteredAt != nil || r.LockedBy != nil {
		t.Fatalf("published event: %s", out)
	}
	// Human.
	code, out, _ = inspect(ids["pub1"])
	for _, re := range []string{`^event ` + ids["pub1"].String() + `: published\n`, `(?m)^  topic +payments$`, `(?m)^  aggregate_id +p1$`,
		`(?m)^  event_type +payment.captured$`, `(?m)^  published_at +\S+ \S+ \(12ms after created_at: from the writing transaction's start to the relay's mark, after Kafka's ack\)$`, `(?m)^  attempts +0$`, `(?m)^  last_error +-$`} {
		if code != 0 || !regexp.MustCompile(re).MatchString(out) {
			t.Errorf("inspect output does not match %s:\n%s", re, out)
		}
	}
	// NULL topic: the relay's default.
	if _, out, _ = inspect(ids["pub2"]); !strings.Contains(out, "the relay's --topic") {
		t.Errorf("NULL topic not explained:\n%s", out)
	}

	// Dead letter.
	code, out, _ = inspect(ids["dead"], "--json")
	r = eventReport{}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 {
		t.Fatal(code, err)
	}
	if r.State != "dead_lettered" || r.Published || r.PublishedAt != nil || r.DeadLetteredAt == nil || r.Attempts != 1 || r.LastError == nil || *r.LastError != "MESSAGE_TOO_LARGE" || r.LockedUntil == nil || *r.LockedUntil != "infinity" {
		t.Fatalf("dead letter: %s", out)
	}
	if _, out, _ = inspect(ids["dead"]); !strings.Contains(out, "DEAD-LETTERED") || !regexp.MustCompile(`(?m)^  last_error +MESSAGE_TOO_LARGE$`).MatchString(out) {
		t.Errorf("dead letter:\n%s", out)
	}

	// Backing off, leased, pending.
	code, out, _ = inspect(ids["backoff"])
	// The time left is at most 30 s and at least 30 s less the time
	// since before the insert (a loaded machine takes more than 1 s).
	elapsed := time.Since(seeded).Seconds()
	left := regexp.MustCompile(`(?m)^  locked_until +.* \(in (\d+\.\d+)s\)$`).FindStringSubmatch(out)
	var leftS float64
	if left != nil {
		leftS, _ = strconv.ParseFloat(left[1], 64)
	}
	if code != 0 || !strings.Contains(out, "waiting for its retry") || !regexp.MustCompile(`(?m)^  attempts +2$`).MatchString(out) ||
		!regexp.MustCompile(`(?m)^  last_error +kafka: NOT_LEADER_FOR_PARTITION$`).MatchString(out) || left == nil || leftS > 30 || leftS < 30-elapsed-0.001 {
		t.Errorf("backing off (%.3fs since before the insert):\n%s", elapsed, out)
	}
	code, out, _ = inspect(ids["la1"], "--json")
	r = eventReport{}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != 0 || r.State != "leased" || r.LockedBy == nil || *r.LockedBy != "relay-a/1234" || r.LockedUntil == nil || !strings.HasPrefix(*r.LockedUntil, "20") {
		t.Fatalf("leased: %s", out)
	}
	if code, out, _ = inspect(ids["c2"]); code != 0 || !strings.Contains(out, "waiting to be claimed") {
		t.Errorf("pending:\n%s", out)
	}

	// Unknown: exit 1 naming retention, human and JSON.
	unknown := uuid.New()
	code, out, stderr = inspect(unknown)
	if code != exitFailure || out != "" || !strings.Contains(stderr, unknown.String()) || !strings.Contains(stderr, "not in table outbox") || !strings.Contains(stderr, "retention") {
		t.Fatalf("unknown ID: exit %d, stdout %q, stderr %q", code, out, stderr)
	}
	code, out, _ = inspect(unknown, "--json")
	r = eventReport{}
	if err := json.Unmarshal([]byte(out), &r); err != nil || code != exitFailure || r.Found || !strings.Contains(r.Message, "retention") {
		t.Fatalf("unknown ID --json: exit %d %s", code, out)
	}

	// Usage errors.
	if code, _, stderr := runMain(t, ctx, "inspect", "--database-url", db.ConnString); code != exitUsage || !strings.Contains(stderr, "--event-id") {
		t.Errorf("no --event-id: %d %s", code, stderr)
	}
	// Event IDs may be text (adopted tables): one that is not of the ID
	// column's type is simply not in the table.
	if code, _, stderr := runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--event-id", "nope"); code != exitFailure || !strings.Contains(stderr, "is not in table") ||
		!strings.Contains(stderr, `"nope" is not a uuid`) {
		t.Errorf("--event-id of another type: %d %s", code, stderr)
	}
}

// TestStatusAndInspectOnADebeziumTable: with --debezium the commands read
// the adopted table's own column names.
func TestStatusAndInspectOnADebeziumTable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.DB(t)
	if _, err := db.Pool.Exec(ctx, `CREATE TABLE outboxevent (
  id uuid NOT NULL,
  aggregatetype varchar(255) NOT NULL,
  aggregateid varchar(255) NOT NULL,
  type varchar(255) NOT NULL,
  payload jsonb,
  PRIMARY KEY (id)
)`); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := runMain(t, ctx, "adopt", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium"); code != 0 {
		t.Fatalf("adopt: %d %s", code, stderr)
	}
	id := uuid.New()
	if _, err := db.Pool.Exec(ctx, "INSERT INTO outboxevent (id, aggregatetype, aggregateid, type, payload) VALUES ($1, 'Order', 'order-1', 'OrderCreated', '{}')", id); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium", "--event-id", id.String(), "--json")
	var r eventReport
	if code != 0 || json.Unmarshal([]byte(out), &r) != nil || r.State != "claimable" || r.AggregateID != "order-1" || r.EventType != "OrderCreated" {
		t.Fatalf("inspect: %d %s %s", code, out, stderr)
	}
	code, out, stderr = runMain(t, ctx, "status", "--database-url", db.ConnString, "--table", "outboxevent", "--debezium", "--json")
	var s statusReport
	if code != 0 || json.Unmarshal([]byte(out), &s) != nil || s.Unpublished.Claimable != 1 || s.OldestUnpublishedEventID == nil || *s.OldestUnpublishedEventID != id.String() {
		t.Fatalf("status: %d %s %s", code, out, stderr)
	}
	// Without --debezium the event columns are not found: named.
	code, _, stderr = runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--table", "outboxevent", "--event-id", id.String())
	if code != exitFailure || !strings.Contains(stderr, "--column-") {
		t.Fatalf("inspect without --debezium: %d %s", code, stderr)
	}
}

// An event behind a held dead letter is not "waiting to be claimed":
// inspect names the dead letter, its seq and the requeue command that
// releases it, and status counts it as held back, apart from the
// claimable ones. The same for an event behind a backing-off earlier
// event; one behind an event a relay leased is waiting to be claimed (the
// relay that owns its aggregate claims it next).
func TestInspectAndStatusSayWhyAnEventWaits(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	bin := buildRelay(t)
	a1, a2, b1, b2, c1, c2 := uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New(), uuid.New()
	if _, err := db.Pool.Exec(ctx, `
INSERT INTO outbox (id, aggregate_id, event_type, payload, locked_until, locked_by, attempts, last_error, dead_lettered_at)
VALUES ($1, 'A', 't', '{}', 'infinity', NULL, 1, 'MESSAGE_TOO_LARGE', now()),
       ($2, 'A', 't', '{}', NULL, NULL, 0, NULL, NULL),
       ($3, 'B', 't', '{}', now() + interval '30 seconds', NULL, 2, 'NOT_LEADER', NULL),
       ($4, 'B', 't', '{}', NULL, NULL, 0, NULL, NULL),
       ($5, 'C', 't', '{}', now() + interval '20 seconds', 'relay-x/1', 0, NULL, NULL),
       ($6, 'C', 't', '{}', NULL, NULL, 0, NULL, NULL)`, a1, a2, b1, b2, c1, c2); err != nil {
		t.Fatal(err)
	}
	var seqA1 int64
	if err := db.Pool.QueryRow(ctx, "SELECT seq FROM outbox WHERE id = $1", a1).Scan(&seqA1); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		id   uuid.UUID
		want string
	}{
		{a2, fmt.Sprintf("held back behind dead letter %s (seq %d) of aggregate A since ", a1, seqA1)},
		{a2, fmt.Sprintf("`outbox-relay requeue --event-id %s` releases it", a1)},
		{b2, fmt.Sprintf("held back behind event %s", b1)},
		{b2, "backing off after a failed publish until "},
		// Behind an event a relay leased: the relay owning the aggregate
		// claims it next, so it is not held back.
		{c2, "not published yet: waiting to be claimed"},
	} {
		code, out, stderr := runBinary(t, bin, nil, "inspect", "--database-url", db.ConnString, "--event-id", tc.id.String())
		if code != 0 || !strings.Contains(out, tc.want) {
			t.Errorf("inspect %s: exit %d, output does not say %q:\n%s%s", tc.id, code, tc.want, out, stderr)
		}
	}
	code, out, _ := runBinary(t, bin, nil, "inspect", "--database-url", db.ConnString, "--event-id", a2.String(), "--json")
	var r eventReport
	if err := json.Unmarshal([]byte(out), &r); code != 0 || err != nil || r.State != "held" || r.HeldBehind == nil ||
		r.HeldBehind.EventID != a1.String() || r.HeldBehind.State != "dead_lettered" || r.HeldBehind.Seq != seqA1 {
		t.Errorf("inspect --json: %d %v %+v\n%s", code, err, r.HeldBehind, out)
	}
	code, out, _ = runBinary(t, bin, nil, "status", "--database-url", db.ConnString, "--json")
	var st statusReport
	if err := json.Unmarshal([]byte(out), &st); code != 0 || err != nil {
		t.Fatalf("status: %d %v %s", code, err, out)
	}
	if u := st.Unpublished; u.Held != 2 || u.Claimable != 1 || u.BackingOff != 1 || u.Leased != 1 || st.DeadLetters != 1 {
		t.Errorf("status counts %+v, dead letters %d; want 2 held back, 1 claimable, 1 backing off, 1 leased, 1 dead letter", u, st.DeadLetters)
	}
}

// A row whose created_at is infinity (plain SQL can write it; the relay
// dead-letters it) made status fail ("cannot subtract infinite timestamps")
// and inspect fail ("cannot scan Infinity into *time.Time"). Both answer.
func TestStatusAndInspectWithAnInfiniteCreatedAt(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	id := uuid.New()
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox (id, aggregate_id, event_type, payload, created_at) VALUES ($1, 'a', 't', '{}', 'infinity')`, id); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString)
	if code != 0 || !strings.Contains(out, id.String()) || !strings.Contains(out, "not a finite time") {
		t.Errorf("status: exit %d\n%s%s", code, out, stderr)
	}
	code, out, stderr = runMain(t, ctx, "inspect", "--database-url", db.ConnString, "--event-id", id.String())
	if code != 0 || !strings.Contains(out, id.String()) {
		t.Errorf("inspect: exit %d\n%s%s", code, out, stderr)
	}
}

// status shows who owns the key partitions: two claimers that joined and
// settled own 128 each, the table is settled; once one's membership ran
// out, it says so and that ownership is not settled.
func TestStatusShowsKeyPartitionOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	var members []string
	var claimers []*claim.Claimer
	// Both memberships outlast the test; relay-y's is ended below, once
	// status has shown it. Neither renews after settling, so no heartbeat
	// removes relay-y's row before status reads it.
	for _, id := range []string{"relay-x", "relay-y"} {
		c, err := claim.New(db.Pool, lease.Config{RelayID: id, Lease: time.Minute})
		if err != nil {
			t.Fatal(err)
		}
		claimers = append(claimers, c)
		members = append(members, c.Member())
	}
	leasetest.Settle(t, db.Pool, "outbox", claimers...)
	code, out, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString)
	if code != 0 {
		t.Fatalf("status: exit %d %s", code, stderr)
	}
	for _, want := range []string{"key partitions: 256, 2 relay(s) running, settled", members[0], members[1]} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
	code, out, stderr = runMain(t, ctx, "status", "--database-url", db.ConnString, "--json")
	if code != 0 {
		t.Fatalf("status --json: exit %d %s", code, stderr)
	}
	var r statusReport
	if err := json.Unmarshal([]byte(out), &r); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !r.KeyPartitionsSettled || r.KeyPartitions == nil || len(r.KeyPartitions.Relays) != 2 ||
		len(r.KeyPartitions.Relays[0].Owned)+len(r.KeyPartitions.Relays[1].Owned) != 256 {
		t.Fatalf("key partitions %+v, settled %v", r.KeyPartitions, r.KeyPartitionsSettled)
	}
	// Once relay-y's membership ran out, status says so, and ownership is
	// no longer settled. It is made to run out now rather than by a short
	// lease, which could end before the reads above on a slow machine.
	if tag, err := db.Pool.Exec(ctx, `UPDATE outbox_relays SET renewed_at = now() - interval '3 seconds', until = now() - interval '1 second'
WHERE member = $1`, members[1]); err != nil || tag.RowsAffected() != 1 {
		t.Fatalf("end relay-y's membership: %v %v", tag, err)
	}
	testenv.Eventually(t, 10*time.Second, func() bool {
		code, out, _ = runMain(t, ctx, "status", "--database-url", db.ConnString)
		return code == 0 && strings.Contains(out, "1 relay(s) running, rebalancing") && strings.Contains(out, "ran out")
	}, "status did not report relay-y's membership ending:\n%s", out)
}

// A relay killed without leaving keeps its membership, and its partitions,
// until the membership runs out (a new user saw "3 relay(s) running,
// settled" 15 s after a SIGKILL while 945 events waited). Status says which
// member is silent: its last renewal is more than two renewals old.
func TestStatusNamesASilentRelay(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	c, err := claim.New(db.Pool, lease.Config{RelayID: "alive", Lease: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	leasetest.Settle(t, db.Pool, "outbox", c)
	// A member with a 30 s membership that last renewed 20 s ago (it
	// renews every 5 s).
	if _, err := db.Pool.Exec(ctx, `INSERT INTO outbox_relays (member, relay_id, started_at, renewed_at, until)
VALUES ('killed/1', 'killed', now() - interval '1 minute', now() - interval '20 seconds', now() + interval '10 seconds')`); err != nil {
		t.Fatal(err)
	}
	code, out, stderr := runMain(t, ctx, "status", "--database-url", db.ConnString)
	if code != 0 {
		t.Fatalf("status: exit %d %s", code, stderr)
	}
	for _, want := range []string{"2 relay(s) running", "1 of them silent", "silent for 20.", "(renews every 5s)"} {
		if !strings.Contains(out, want) {
			t.Errorf("status does not say %q:\n%s", want, out)
		}
	}
	if strings.Count(out, "silent for") != 1 {
		t.Errorf("status calls more than the killed member silent:\n%s", out)
	}
}
