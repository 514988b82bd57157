package relay

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"strconv"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
)

// A randomized model test of the relay's ordering and progress, with no
// database and no broker: an in-memory outbox table whose claim follows
// claim.Claimer's rules (seq order; rows leased or backing off are not
// taken; a row waits while an earlier row of its aggregate is leased by
// another holder, backing off or held as a dead letter; this relay's own
// leases do not block it), and an in-memory broker that fails, rejects and
// goes down at random. The test drives the real publisher code
// (Relay.claim, Relay.publishBatch with its hold-back state and claim gate,
// settle) through random interleavings of inserts, claims (the claimer
// running up to two batches ahead, as the pipeline lets it), publishes and
// clock ticks, and checks both halves of the contract:
//
//   - order: no event reaches the broker before an earlier event of its
//     aggregate (dead letters in skip mode excepted);
//   - progress: once faults stop and dead letters are requeued, every event
//     is published within a bounded number of steps.

type mrow struct {
	seq         int64
	id          string
	agg         string
	poison      bool // the broker rejects it (MESSAGE_TOO_LARGE)
	published   bool
	delivered   bool // reached the broker at least once
	dead        bool
	skipDead    bool // dead-lettered in skip mode at least once
	token       uuid.UUID
	lockedBy    string
	lockedUntil time.Time
	attempts    int
}

type model struct {
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	lease   time.Duration
	batch   int
	me      string
	rows    []*mrow
	byAgg   map[string][]*mrow
	byID    map[string]*mrow
	floor   int // rows before it are published
	pending int // rows not published
	mode    DeadLetterMode
	faults  bool    // phase 1: faults injected
	pFail   float64 // a key's messages in a call fail (retriable)
	pDown   float64 // a whole call finds the broker unreachable
	pStuck  float64 // a release or dead-letter statement fails
	aggs    int
	claims  int
	viol    []string
	publish int      // Publish calls
	trace   []string // what happened, for a failure's report
	tracing bool
	// heldAfter counts rows held back after the faults stopped.
	heldAfter int64
}

func (m *model) logf(format string, args ...any) {
	if !m.tracing {
		return
	}
	m.trace = append(m.trace, fmt.Sprintf("%6.3fs ", float64(m.now.UnixNano()%1e9)/1e9)+fmt.Sprintf(format, args...))
	if len(m.trace) > 400 {
		m.trace = m.trace[len(m.trace)-300:]
	}
}

func rowsOf(rows []*mrow) string {
	s := ""
	for _, r := range rows {
		s += fmt.Sprintf(" %s/%d", r.agg, r.seq)
	}
	return s
}

var farFuture = time.Unix(1<<40, 0)

func (m *model) insert(n int) {
	for i := 0; i < n; i++ {
		seq := int64(len(m.rows) + 1)
		r := &mrow{seq: seq, id: "e" + strconv.FormatInt(seq, 10), agg: "A" + strconv.Itoa(m.rng.IntN(m.aggs))}
		r.poison = m.faults && m.rng.IntN(200) == 0
		m.rows = append(m.rows, r)
		m.pending++
		m.byAgg[r.agg] = append(m.byAgg[r.agg], r)
		m.byID[r.id] = r
	}
}

// blocked is the claim's order guard.
func (m *model) blocked(r *mrow) bool {
	for _, p := range m.byAgg[r.agg] {
		if p.seq >= r.seq {
			return false
		}
		if !p.published && p.lockedUntil.After(m.now) && p.lockedBy != m.me {
			return true
		}
	}
	return false
}

func (m *model) Claim(ctx context.Context, marks ...*claim.Mark) (*claim.Batch, error) {
	for _, mk := range marks {
		mk.Marked, _ = m.MarkPublished(ctx, mk.Token, mk.Seqs)
	}
	b := &claim.Batch{Token: uuid.New(), Claimed: m.now, LockedUntil: m.now.Add(m.lease)}
	for m.floor < len(m.rows) && m.rows[m.floor].published {
		m.floor++
	}
	for _, r := range m.rows[m.floor:] {
		if len(b.Rows) == m.batch {
			break
		}
		if r.published || r.dead || r.lockedUntil.After(m.now) || m.blocked(r) {
			continue
		}
		if r.lockedBy != "" {
			b.TakenOver++
		}
		r.token, r.lockedBy, r.lockedUntil = b.Token, m.me, m.now.Add(m.lease)
		b.Rows = append(b.Rows, claim.Row{Seq: r.seq, ID: r.id, AggregateID: r.agg, Attempts: r.attempts, Payload: []byte(`{}`)})
	}
	m.claims++
	if len(b.Rows) > 0 {
		var rs []*mrow
		for _, x := range b.Rows {
			rs = append(rs, m.rows[x.Seq-1])
		}
		m.logf("claim %s:%s", b.Token.String()[:4], rowsOf(rs))
	}
	return b, nil
}

func (m *model) held(token uuid.UUID, seqs []int64, f func(*mrow)) int64 {
	n := int64(0)
	var rs []*mrow
	for _, s := range seqs {
		if r := m.rows[s-1]; r.token == token && !r.published {
			f(r)
			n++
			rs = append(rs, r)
		}
	}
	m.logf("  settle %s:%s", token.String()[:4], rowsOf(rs))
	return n
}

func (m *model) MarkPublished(_ context.Context, token uuid.UUID, seqs []int64) (int64, error) {
	return m.held(token, seqs, func(r *mrow) { r.published, r.lockedUntil = true, time.Time{}; m.pending-- }), nil
}

func (m *model) Extend(_ context.Context, token uuid.UUID, seqs []int64) ([]int64, time.Duration, error) {
	var kept []int64
	m.held(token, seqs, func(r *mrow) { r.lockedUntil = m.now.Add(m.lease); kept = append(kept, r.seq) })
	return kept, m.lease, nil
}

func (m *model) Settled(uuid.UUID, time.Time) {}

// PollShared: the model has one relay, which polls for itself.
func (m *model) PollShared() {}

func (m *model) Ownership() claim.Ownership {
	return claim.Ownership{Member: m.me, Partitions: 1, Owned: 1, Members: 1}
}

var errStuck = errors.New("model: connection reset")

func (m *model) Release(_ context.Context, s claim.Settle) (int64, error) {
	if m.faults && m.rng.Float64() < m.pStuck {
		m.logf("  release %s FAILED %v", s.Token.String()[:4], s.Seqs)
		return 0, errStuck
	}
	m.logf("  release retry_in=%s", s.RetryIn)
	return m.held(s.Token, s.Seqs, func(r *mrow) {
		r.token, r.lockedBy, r.lockedUntil = uuid.Nil, "", time.Time{}
		if s.RetryIn > 0 {
			r.lockedUntil = m.now.Add(s.RetryIn)
		}
		if s.CountAttempt {
			r.attempts++
		}
	}), nil
}

func (m *model) DeadLetter(_ context.Context, s claim.Settle) (int64, error) {
	if m.faults && m.rng.Float64() < m.pStuck {
		m.logf("  dead-letter %s FAILED %v", s.Token.String()[:4], s.Seqs)
		return 0, errStuck
	}
	m.logf("  dead-letter hold=%v", s.Hold)
	return m.held(s.Token, s.Seqs, func(r *mrow) {
		r.token, r.lockedBy, r.lockedUntil, r.dead = uuid.Nil, "", time.Time{}, true
		if s.Hold {
			r.lockedUntil = farFuture
		} else {
			r.skipDead = true
		}
	}), nil
}

// requeue is `outbox-relay requeue --all-dead-letters`.
func (m *model) requeue() {
	for _, r := range m.rows {
		if r.dead && !r.published {
			r.dead, r.lockedUntil, r.attempts, r.poison = false, time.Time{}, 0, false
		}
	}
}

func (m *model) Close(context.Context) error { return nil }
func (m *model) Config() lease.Config {
	return lease.Config{Table: "outbox", Lease: m.lease, BatchSize: m.batch, RelayID: m.me}
}

// Publish is the broker: per call, down (every message unreachable) with
// pDown; per key, all its messages fail with pFail (one partition's batch
// is all or nothing); a poison message is rejected, and with it the rest of
// its key in the call, as a broker refuses a whole record batch.
func (m *model) Publish(ctx context.Context, msgs []kafka.Message) []produce.Result {
	return produce.Path{Send: m.send, MaxBytes: m.MaxBatchBytes(), MaxMessages: 1000}.Publish(ctx, msgs)
}

// send answers one produce request (produce.Path cuts them).
func (m *model) send(_ context.Context, msgs []kafka.Message) error {
	m.publish++
	if m.faults && m.rng.Float64() < m.pDown {
		return fmt.Errorf("publish: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	}
	errs := make([]error, len(msgs))
	failKey := map[string]error{}
	failed := false
	for i := range msgs {
		key := string(msgs[i].Key)
		if _, seen := failKey[key]; !seen {
			failKey[key] = nil
			if m.faults && m.rng.Float64() < m.pFail {
				failKey[key] = kafkago.NotEnoughReplicas
			}
		}
		if m.faults && m.byID[string(msgs[i].Headers[0].Value)].poison && failKey[key] == nil {
			failKey[key] = kafkago.MessageSizeTooLarge
			for j := 0; j < i; j++ { // the whole key's batch is refused
				if string(msgs[j].Key) == key {
					errs[j] = kafkago.MessageSizeTooLarge
				}
			}
		}
		if errs[i] = failKey[key]; errs[i] != nil {
			failed = true
		}
	}
	for i := range msgs {
		r := m.byID[string(msgs[i].Headers[0].Value)]
		if errs[i] == nil {
			m.deliver(r)
			m.logf("  publish %s/%d ok", r.agg, r.seq)
		} else {
			m.logf("  publish %s/%d FAILED %v", r.agg, r.seq, errs[i])
		}
	}
	if failed {
		return &produce.PublishError{Errs: errs}
	}
	return nil
}

func (m *model) deliver(r *mrow) {
	if r.delivered {
		return
	}
	r.delivered = true
	for _, p := range m.byAgg[r.agg] {
		if p.seq >= r.seq {
			break
		}
		if !p.delivered && !p.skipDead {
			m.viol = append(m.viol, fmt.Sprintf("%s (seq %d) delivered before %s (seq %d) of aggregate %s", r.id, r.seq, p.id, p.seq, r.agg))
		}
	}
}

func (m *model) MaxBatchBytes() int64 { return 2000 } // a few messages per request: many requests per batch

func (m *model) unpublished() int { return m.pending }

// runModel runs one seed: faultSteps steps with faults, then steps without
// until everything is published. It returns the steps phase 2 took.
func runModel(t *testing.T, seed uint64, mode DeadLetterMode, faultSteps int) (int, *model) {
	m := &model{t: t, rng: rand.New(rand.NewPCG(seed, 7)), now: time.Now(), lease: 2 * time.Second, batch: 8,
		me: "me/1", byID: map[string]*mrow{}, byAgg: map[string][]*mrow{}, mode: mode, faults: true, aggs: 1 + int(seed%7),
		pFail: 0.1, pDown: 0.05, pStuck: 0.05}
	r, err := New(Config{Topic: "t", RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, MaxAttempts: 3, OnDeadLetter: mode}, m, m, nil, zap.NewNop())
	if err != nil {
		t.Fatal(err)
	}
	r.marks.limit = 1 << 20 // no marker goroutine here: the model marks
	useClock(r, stubClock{now: func() time.Time { return m.now }})
	ctx := context.Background()
	var queue []claimed // claimed, not yet published: the channel's slot and the claimer's hand
	// Marks ride on the next claim (marks.go) or are marked alone after
	// markDelay; the model marks what waits at random moments.
	drainMarks := func() {
		for _, j := range r.marks.take(time.Time{}) {
			_, _ = m.MarkPublished(ctx, j.token, j.seqs)
		}
	}
	claim := func() {
		if len(queue) >= 2 || !r.gate.pass() {
			return
		}
		b, no, err := r.claim(ctx)
		if err == nil && len(b.Rows) > 0 {
			queue = append(queue, claimed{Batch: b, no: no})
			r.gate.batchSent()
		}
	}
	publish := func() {
		if len(queue) == 0 {
			return
		}
		b := queue[0]
		queue = queue[1:]
		m.logf("publish batch %d (%s)", b.no, b.Token.String()[:4])
		r.publishBatch(ctx, ctx, b)
		if m.rng.IntN(2) == 0 {
			drainMarks()
		}
	}
	// eager schedules the claimer as it runs on a backlog: it claims again
	// as soon as it handed a batch over, so two claimed batches wait
	// whenever the publisher takes one.
	eager := seed%2 == 0
	step := func(inserts bool) {
		x := m.rng.IntN(100)
		switch {
		case x < 20 && inserts:
			m.insert(1 + m.rng.IntN(6))
		case x < 50 && !eager:
			claim()
		case x < 85:
			if eager {
				claim()
				claim()
			}
			publish()
		case x < 99:
			m.now = m.now.Add(time.Duration(m.rng.IntN(40)) * time.Millisecond)
		default:
			m.now = m.now.Add(m.lease) // a stall: leases end, backoffs run out
			m.logf("clock jumps a lease")
		}
		if len(m.viol) > 0 {
			for _, l := range m.trace {
				t.Log(l)
			}
			t.Fatalf("seed %d (%s): order violated: %s", seed, mode, m.viol[0])
		}
	}
	for i := 0; i < faultSteps; i++ {
		if i%97 == 0 && m.rng.IntN(2) == 0 {
			m.requeue() // an operator requeues while faults go on
		}
		step(true)
	}
	// Faults stop; the operator requeues the dead letters. Publishing must
	// finish: a bounded number of steps, whatever the backlog.
	m.faults = false
	m.requeue()
	steps := 0
	heldBefore := r.Stats().HeldBack
	defer func() { m.heldAfter = r.Stats().HeldBack - heldBefore }()
	for m.unpublished() > 0 || len(queue) > 0 {
		steps++
		if steps > 4000 {
			for _, x := range m.rows {
				if !x.published {
					t.Logf("unpublished %+v (now %v)", *x, m.now.Sub(x.lockedUntil))
				}
			}
			t.Fatalf("seed %d (%s): no progress: %d of %d events unpublished after %d steps without faults (claims %d, holds on %d aggregates, stats %+v)",
				seed, mode, m.unpublished(), len(m.rows), steps, m.claims, r.hb.holding(), r.Stats())
		}
		step(false)
	}
	return steps, m
}

func TestModelOrderAndProgress(t *testing.T) {
	worst, rows, heldAfter := 0, 0, int64(0)
	// 120 seeds × 2 modes run in well under a second; more with
	// OUTBOX_MODEL_SEEDS=N.
	seeds := uint64(120)
	if n, err := strconv.ParseUint(os.Getenv("OUTBOX_MODEL_SEEDS"), 10, 64); err == nil && n > 0 {
		seeds = n
	}
	for seed := uint64(1); seed <= seeds; seed++ {
		for _, mode := range []DeadLetterMode{DeadLetterHold, DeadLetterSkip} {
			steps, m := runModel(t, seed, mode, 600)
			worst = max(worst, steps)
			heldAfter += m.heldAfter
			rows += len(m.rows)
		}
	}
	t.Logf("%d runs, %d events: every event published in order; at most %d steps after the faults stopped, %d events held back after them", 2*seeds, rows, worst, heldAfter)
}
