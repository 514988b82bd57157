package relay

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
	kafkago "github.com/segmentio/kafka-go"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/internal/claim"
	"github.com/pgoutbox/outbox/internal/ownership"
	"github.com/pgoutbox/outbox/internal/produce"
	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/lease"
)

// The ownership model: several relays on one in-memory outbox table with
// key partitions, members and owners kept by claim.Claimer's rules (the
// same ownership.PlanRebalance decides every rebalance; a member's leases end
// no later than its membership; a claim takes rows of the partitions its
// member owns and is not giving back; a partition is given back once its
// relay settled every batch holding rows of it), and relays that join,
// leave gracefully, are killed (their leases and membership simply run
// out) and are paused for longer than a lease (they come back with stale
// batches), at random, while the broker fails and goes down. Each relay is
// the real Relay (claim, publishBatch, settle, the hold-back state and the
// gate). Checked: no event reaches the broker before an earlier event of
// its aggregate, and once the faults stop every event is published within
// a bounded number of steps.
//
// Every relay is a static member (lease.Config.RelayID set: the member is
// the relay ID, locked_by its incarnation), and the relays are also
// restarted under the same relay ID, by the rules of claim.Claimer's
// static membership (TakeOver, Rejoin and the started_at checks of
// sql/membership.sql, sql/claim.sql and sql/settle.sql; presence.go):
//
//   - kill and restart: the old process is gone (SIGKILL: no leave, no
//     release, its presence session ended by the server); the new one's
//     first join takes the member's row over and ends the old one's
//     leases if it had declared its presence, else keeps them;
//   - pause and restart: the old process stops (SIGSTOP) holding its
//     presence session and its claimed batches; the new one takes the row
//     over and keeps the old one's leases (its claims run the order guard
//     until they end, and it keeps the partitions it owns busy as long);
//     the old one wakes later, publishes what it held to the broker, and
//     is fenced: it claims, extends and moves nothing, its marks and
//     releases count only by claim token.
//
// The claim runs its order guard as the real one does: only while a row
// backs off or is held ('holds'), or while leases of an earlier
// incarnation may run (a takeover that kept some); otherwise other
// holders' leases are not looked at (they own other partitions).

type orow struct {
	seq         int64
	id, agg     string
	part        int
	published   bool
	delivered   bool
	dead        bool
	token       uuid.UUID
	lockedBy    string
	lockedUntil time.Time
	attempts    int
}

type ownModel struct {
	t       *testing.T
	rng     *rand.Rand
	now     time.Time
	lease   time.Duration
	batch   int
	parts   int
	aggs    int
	rows    []*orow
	byAgg   map[string][]*orow
	byID    map[string]*orow
	members map[string]*omember
	owners  []string
	gen     int64
	faults  bool
	pending int
	viol    []string
	relays  []*orelay
	next    int // relays started
	trace   []string
	// holdsUntil is the order guard's 'holds' entry: while it lies
	// ahead, every claim runs the guard.
	holdsUntil time.Time
	started    int64 // the last started_at given to a member row
	// handovers counts partitions acquired from another member, released
	// those given back; stale counts batches a relay came back to after a
	// pause longer than its membership.
	handovers, released, stale int
	// killRestarts and pauseRestarts count restarts under the same relay
	// ID; ended the leases takeovers ended (the old process gone), kept
	// the takeovers that kept leases of an old process; woke counts
	// replaced processes that woke with claimed batches, fenced their
	// rows whose mark, extension or release found the row no longer
	// theirs.
	killRestarts, pauseRestarts, ended, kept, woke, fenced int
}

// omember is a row of <table>_relays: until, and started_at (the
// incarnation that holds the row).
type omember struct {
	until   time.Time
	started int64
}

func (m *ownModel) until(member string) time.Time {
	if mb := m.members[member]; mb != nil {
		return mb.until
	}
	return time.Time{}
}

func (m *ownModel) logf(format string, args ...any) {
	m.trace = append(m.trace, fmt.Sprintf("%7.3f ", float64(m.now.UnixNano()%100e9)/1e9)+fmt.Sprintf(format, args...))
	if len(m.trace) > 600 {
		m.trace = m.trace[len(m.trace)-400:]
	}
}

func orows(rows []claim.Row) string {
	s := ""
	for _, r := range rows {
		s += fmt.Sprintf(" %s/%d", r.AggregateID, r.Seq)
	}
	return s
}

// orelay is one relay process of the model: the real Relay, and the
// claimer state claim.Claimer keeps.
type orelay struct {
	m *ownModel
	// name is the process's incarnation, its holder in locked_by
	// (<member>/<n>); member its relay ID, the member's name.
	name, member string
	relay        *Relay
	queue        []claimed
	state        string // "running", "leaving", "paused", "dead", "left"
	wakeAt       time.Time
	// Static membership: started is the started_at of the member's row
	// this incarnation holds (0 before its first join, a takeover);
	// replaced says a later incarnation took the row over;
	// takeoverUntil is until when the leases a takeover kept may run
	// (the claims run the order guard until then); claims counts Claim
	// calls and declared is until when its presence is declared in the
	// order guard (presence.go: the presence session holds its lock by
	// the second claim, which declares it).
	started       int64
	replaced      bool
	takeoverUntil time.Time
	claims        int
	declared      time.Time
	restarted     bool // paused and restarted under its relay ID
	// claim.Claimer's ownership state.
	joined    bool
	seenGen   int64
	renewed   time.Time
	owned     map[int]bool
	releasing map[int]bool
	busy      map[int]int
	busyUntil map[int]time.Time
	batches   map[uuid.UUID][]int
}

func (m *ownModel) insert(n int) {
	for range n {
		seq := int64(len(m.rows) + 1)
		agg := "A" + strconv.Itoa(m.rng.IntN(m.aggs))
		r := &orow{seq: seq, id: "e" + strconv.FormatInt(seq, 10), agg: agg, part: outbox.KeyPartition(agg, m.parts)}
		m.rows = append(m.rows, r)
		m.byAgg[agg] = append(m.byAgg[agg], r)
		m.byID[r.id] = r
		m.pending++
	}
}

func (m *ownModel) live() []string {
	var out []string
	for name, mb := range m.members {
		if mb.until.After(m.now) {
			out = append(out, name)
		}
	}
	slices.Sort(out)
	return out
}

// startRelay starts a relay process: under relay ID member, or a new one
// when "".
func (m *ownModel) startRelay(member string) *orelay {
	m.next++
	if member == "" {
		member = fmt.Sprintf("r%d", m.next)
	}
	o := &orelay{m: m, name: fmt.Sprintf("%s/%d", member, m.next), member: member, state: "running", owned: map[int]bool{}, releasing: map[int]bool{},
		busy: map[int]int{}, busyUntil: map[int]time.Time{}, batches: map[uuid.UUID][]int{}}
	r, err := New(Config{Topic: "t", RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, MaxAttempts: 3}, o, m, nil, zap.NewNop())
	if err != nil {
		m.t.Fatal(err)
	}
	r.marks.limit = 1 << 20
	useClock(r, stubClock{now: func() time.Time { return m.now }})
	o.relay = r
	m.relays = append(m.relays, o)
	return o
}

func (o *orelay) idle(p int) bool {
	if o.busy[p] > 0 {
		return false
	}
	return !o.m.now.Before(o.busyUntil[p])
}

// mine reports whether the member's row is this incarnation's (the
// started_at check of a static member's statements).
func (o *orelay) mine() bool {
	mb := o.m.members[o.member]
	return mb != nil && mb.started == o.started
}

// alive reports whether the process lives (its presence session with it).
func (o *orelay) alive() bool { return o.state != "dead" && o.state != "left" }

// takeOver is TakeOver (sql/membership.sql), a static member's first join:
// the row becomes this incarnation's; leases of earlier incarnations that
// declared a presence nobody holds any more are ended, the others kept.
// It returns until when the leases kept may run (zero: none).
func (o *orelay) takeOver() time.Time {
	m := o.m
	gone := map[string]bool{}
	for _, p := range m.relays {
		if p != o && p.member == o.member && p.declared.After(m.now) && !p.alive() {
			gone[p.name] = true
			p.declared = time.Time{}
		}
	}
	var blocked time.Time
	n := 0
	for _, r := range m.rows {
		if r.published || !r.lockedUntil.After(m.now) || r.lockedBy == "" || r.lockedBy == o.name || !strings.HasPrefix(r.lockedBy, o.member+"/") {
			continue
		}
		if gone[r.lockedBy] {
			r.token, r.lockedBy, r.lockedUntil = uuid.Nil, "", time.Time{}
			n++
		} else if r.lockedUntil.After(blocked) {
			blocked = r.lockedUntil
		}
	}
	m.started++
	o.started = m.started
	m.members[o.member] = &omember{until: m.now.Add(m.lease), started: o.started}
	m.gen++
	m.ended += n
	if !blocked.IsZero() {
		m.kept++
		blocked = blocked.Add(time.Second)
	}
	if blocked.IsZero() {
		m.logf("%s takes member %s over: %d leases ended, none kept", o.name, o.member, n)
	} else {
		m.logf("%s takes member %s over: %d leases ended, others kept until %v from now", o.name, o.member, n, blocked.Sub(m.now))
	}
	return blocked
}

// rebalance is claim.Claimer.rebalance on the model's tables.
func (o *orelay) rebalance() {
	m := o.m
	for name, mb := range m.members {
		if !mb.until.After(m.now) && name != o.member {
			delete(m.members, name)
			m.gen++
		}
	}
	var blocked time.Time
	switch mb := m.members[o.member]; {
	case o.started == 0:
		blocked = o.takeOver()
	case mb == nil:
		// Rejoin: the row is gone (its until passed), inserted again.
		m.started++
		o.started = m.started
		m.members[o.member] = &omember{until: m.now.Add(m.lease), started: o.started}
		m.gen++
	case mb.started != o.started:
		// Rejoin: a later incarnation holds the row.
		m.logf("%s finds itself replaced", o.name)
		o.replaced, o.owned, o.releasing = true, map[int]bool{}, map[int]bool{}
		o.joined, o.renewed, o.seenGen = true, m.now, m.gen
		return
	default:
		mb.until = m.now.Add(m.lease)
	}
	o.joined, o.renewed = true, m.now
	if !blocked.IsZero() {
		// As the claimer's rebalance: every partition the member owns
		// stays busy while the leases a takeover kept may run.
		for p, who := range m.owners {
			if who == o.member && blocked.After(o.busyUntil[p]) {
				o.busyUntil[p] = blocked
			}
		}
	}
	plan := ownership.PlanRebalance(o.member, m.live(), m.owners, o.idle)
	for _, p := range plan.Acquire {
		if w := m.owners[p]; w == "" || !m.until(w).After(m.now) {
			m.logf("%s acquires partition %d from %q", o.name, p, w)
			if w != "" {
				m.handovers++
			}
			m.owners[p] = o.member
			plan.Owned[p] = true
			m.gen++
		}
	}
	for _, p := range plan.Release {
		if m.owners[p] == o.member {
			m.logf("%s gives back partition %d", o.name, p)
			m.released++
			m.owners[p] = ""
			delete(plan.Owned, p)
			m.gen++
		}
	}
	o.owned, o.releasing = plan.Owned, map[int]bool{}
	for p := range plan.Releasing {
		if o.owned[p] {
			o.releasing[p] = true
		}
	}
	if !blocked.IsZero() {
		// keepBusy, after the partitions owned are known.
		o.takeoverUntil = blocked
		for p := range o.owned {
			if blocked.After(o.busyUntil[p]) {
				o.busyUntil[p] = blocked
			}
		}
	}
	o.seenGen = m.gen
}

func (o *orelay) rebalanceDue() bool {
	m := o.m
	if o.replaced {
		return false
	}
	if !o.joined || o.seenGen != m.gen || m.now.Sub(o.renewed) >= m.lease/6 {
		return true
	}
	for name, mb := range m.members {
		if name != o.member && !mb.until.After(m.now) {
			return true
		}
	}
	for p := range o.releasing {
		if o.idle(p) {
			return true
		}
	}
	return false
}

// guard reports whether a claim runs the order guard: a row backs off or
// is held ('holds'), or leases an earlier incarnation's takeover kept may
// run (ForceGuard).
func (o *orelay) guard() bool {
	return o.m.holdsUntil.After(o.m.now) || o.takeoverUntil.After(o.m.now)
}

// blocked is the claim's order guard: an earlier unpublished row of the
// aggregate backing off, held, or leased under another holder.
func (o *orelay) blocked(r *orow) bool {
	for _, p := range o.m.byAgg[r.agg] {
		if p.seq >= r.seq {
			return false
		}
		if !p.published && p.lockedUntil.After(o.m.now) && p.lockedBy != o.name {
			return true
		}
	}
	return false
}

func (o *orelay) Claim(ctx context.Context, marks ...*claim.Mark) (*claim.Batch, error) {
	m := o.m
	for _, mk := range marks {
		mk.Marked, _ = o.MarkPublished(ctx, mk.Token, mk.Seqs)
	}
	if o.rebalanceDue() {
		o.rebalance()
	}
	if o.claims++; o.claims > 1 && o.alive() {
		o.declared = m.now.Add(3 * m.lease)
	}
	until := m.until(o.member)
	b := &claim.Batch{Token: uuid.New(), Claimed: m.now}
	if o.replaced || !o.mine() || !until.After(m.now) {
		return b, nil
	}
	lockedUntil := minTime(m.now.Add(m.lease), until)
	b.LockedUntil, b.Lease = lockedUntil, lockedUntil.Sub(m.now)
	guard := o.guard()
	var ps []int
	for _, r := range m.rows {
		if len(b.Rows) == m.batch {
			break
		}
		if r.published || r.dead || r.lockedUntil.After(m.now) || m.owners[r.part] != o.member || o.releasing[r.part] || (guard && o.blocked(r)) {
			continue
		}
		if r.lockedBy != "" {
			b.TakenOver++
		}
		r.token, r.lockedBy, r.lockedUntil = b.Token, o.name, lockedUntil
		b.Rows = append(b.Rows, claim.Row{Seq: r.seq, ID: r.id, AggregateID: r.agg, Attempts: r.attempts, KeyPartition: r.part, Payload: []byte(`{}`)})
		if !slices.Contains(ps, r.part) {
			ps = append(ps, r.part)
		}
	}
	for _, p := range ps {
		o.busy[p]++
	}
	if len(ps) > 0 {
		o.batches[b.Token] = ps
		m.logf("%s claims %s:%s", o.name, b.Token.String()[:4], orows(b.Rows))
	}
	return b, nil
}

func minTime(a, b time.Time) time.Time {
	if a.Before(b) {
		return a
	}
	return b
}

func (o *orelay) held(token uuid.UUID, seqs []int64, f func(*orow)) int64 {
	n := int64(0)
	var done []int64
	for _, s := range seqs {
		if r := o.m.rows[s-1]; r.token == token && !r.published {
			f(r)
			n++
			done = append(done, s)
		} else if o.replaced || !o.mine() {
			o.m.fenced++
		}
	}
	o.m.logf("  %s settles %s: %v of %v", o.name, token.String()[:4], done, seqs)
	return n
}

func (o *orelay) MarkPublished(_ context.Context, token uuid.UUID, seqs []int64) (int64, error) {
	return o.held(token, seqs, func(r *orow) { r.published, r.lockedUntil = true, time.Time{}; o.m.pending-- }), nil
}

// Extend renews rows still held by token, of partitions this member owns,
// while its membership runs; never past it.
func (o *orelay) Extend(_ context.Context, token uuid.UUID, seqs []int64) ([]int64, time.Duration, error) {
	m := o.m
	until := m.until(o.member)
	if !until.After(m.now) || !o.mine() {
		if o.replaced || !o.mine() {
			m.fenced += len(seqs)
		}
		return nil, 0, nil
	}
	lockedUntil := minTime(m.now.Add(m.lease), until)
	var kept []int64
	o.held(token, seqs, func(r *orow) {
		if m.owners[r.part] == o.member {
			r.lockedUntil = lockedUntil
			kept = append(kept, r.seq)
		}
	})
	return kept, lockedUntil.Sub(m.now), nil
}

func (o *orelay) Release(_ context.Context, s claim.Settle) (int64, error) {
	return o.held(s.Token, s.Seqs, func(r *orow) {
		r.token, r.lockedBy, r.lockedUntil = uuid.Nil, "", time.Time{}
		if s.RetryIn > 0 {
			r.lockedUntil = o.m.now.Add(s.RetryIn)
			if r.lockedUntil.After(o.m.holdsUntil) {
				o.m.holdsUntil = r.lockedUntil // Hold
			}
		}
		if s.CountAttempt {
			r.attempts++
		}
	}), nil
}

func (o *orelay) DeadLetter(_ context.Context, s claim.Settle) (int64, error) {
	if s.Hold {
		o.m.holdsUntil = farFuture
	}
	return o.held(s.Token, s.Seqs, func(r *orow) {
		r.token, r.lockedBy, r.lockedUntil, r.dead = uuid.Nil, "", farFuture, true
	}), nil
}

// PollShared: the model's relays have no listener, and poll for
// themselves.
func (o *orelay) PollShared() {}

func (o *orelay) Settled(token uuid.UUID, busyUntil time.Time) {
	for _, p := range o.batches[token] {
		if o.busy[p]--; o.busy[p] <= 0 {
			delete(o.busy, p)
		}
		if busyUntil.After(o.busyUntil[p]) {
			o.busyUntil[p] = busyUntil
		}
	}
	delete(o.batches, token)
}

func (o *orelay) Ownership() claim.Ownership {
	return claim.Ownership{Member: o.member, Partitions: o.m.parts, Owned: len(o.owned), Releasing: len(o.releasing), Members: len(o.m.live()),
		Static: true, Replaced: o.replaced, TakeoverBlocked: o.takeoverUntil}
}

// Close is claim.Claimer.Close: idle partitions given back, the member
// removed when none is left busy (Leave, only while the row is this
// incarnation's); the presence ends and is withdrawn.
func (o *orelay) Close(context.Context) error {
	m := o.m
	o.declared = time.Time{}
	if o.replaced || !o.mine() {
		return nil
	}
	busy := false
	for p := range o.owned {
		if o.idle(p) && m.owners[p] == o.member {
			m.owners[p] = ""
			m.gen++
		} else if !o.idle(p) {
			busy = true
		}
	}
	if !busy {
		delete(m.members, o.member)
		m.gen++
	}
	return nil
}

func (o *orelay) Config() lease.Config {
	return lease.Config{Table: "outbox", Lease: o.m.lease, BatchSize: o.m.batch, RelayID: o.member}
}

// Publish is the broker, shared by the relays: down with 5%, a key's
// messages failing with 10% (NOT_ENOUGH_REPLICAS, an outage: no attempt
// counted) while faults run.
func (m *ownModel) Publish(ctx context.Context, msgs []kafka.Message) []produce.Result {
	return produce.Path{Send: m.send, MaxBytes: m.MaxBatchBytes(), MaxMessages: 1000}.Publish(ctx, msgs)
}

// send answers one produce request (produce.Path cuts them).
func (m *ownModel) send(_ context.Context, msgs []kafka.Message) error {
	if m.faults && m.rng.Float64() < 0.05 {
		return fmt.Errorf("publish: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	}
	errs := make([]error, len(msgs))
	failKey := map[string]error{}
	failed := false
	for i := range msgs {
		key := string(msgs[i].Key)
		if _, seen := failKey[key]; !seen {
			failKey[key] = nil
			if m.faults && m.rng.Float64() < 0.1 {
				failKey[key] = kafkago.NotEnoughReplicas
			}
		}
		if errs[i] = failKey[key]; errs[i] != nil {
			failed = true
		}
	}
	for i := range msgs {
		r := m.byID[string(msgs[i].Headers[0].Value)]
		if errs[i] == nil {
			m.logf("  publish %s/%d ok", r.agg, r.seq)
			m.deliver(r)
		} else {
			m.logf("  publish %s/%d FAILED", r.agg, r.seq)
		}
	}
	if failed {
		return &produce.PublishError{Errs: errs}
	}
	return nil
}

func (m *ownModel) MaxBatchBytes() int64 { return 2000 }

func (m *ownModel) deliver(r *orow) {
	if r.delivered {
		return
	}
	r.delivered = true
	for _, p := range m.byAgg[r.agg] {
		if p.seq >= r.seq {
			break
		}
		if !p.delivered {
			m.viol = append(m.viol, fmt.Sprintf("%s (seq %d) delivered before %s (seq %d) of aggregate %s", r.id, r.seq, p.id, p.seq, r.agg))
		}
	}
}

// step runs one action of relay o: claim (up to two batches ahead),
// publish one batch, or mark what waits.
func (o *orelay) step(ctx context.Context) {
	m := o.m
	r := o.relay
	switch x := m.rng.IntN(10); {
	case x < 4 && o.state == "running":
		if len(o.queue) >= 2 || !r.gate.pass() {
			return
		}
		b, no, err := r.claim(ctx)
		if err == nil && len(b.Rows) > 0 {
			o.queue = append(o.queue, claimed{Batch: b, no: no})
			r.gate.batchSent()
		}
	case x < 9 && len(o.queue) > 0:
		b := o.queue[0]
		o.queue = o.queue[1:]
		m.logf("%s publishes batch %s", o.name, b.Token.String()[:4])
		r.publishBatch(ctx, ctx, b)
	default:
		for _, j := range r.marks.take(time.Time{}) {
			_, _ = o.MarkPublished(ctx, j.token, j.seqs)
		}
	}
	if o.state == "leaving" && len(o.queue) == 0 {
		for _, j := range r.marks.take(time.Time{}) {
			_, _ = o.MarkPublished(ctx, j.token, j.seqs)
		}
		_ = o.Close(ctx)
		o.state = "left"
	}
}

// runOwnerModel runs one seed; restarts adds restarts under the same relay
// ID to the lifecycle's choices.
func runOwnerModel(t *testing.T, seed uint64, faultSteps int, restarts bool) (int, *ownModel) {
	m := &ownModel{t: t, rng: rand.New(rand.NewPCG(seed, 11)), now: time.Now(), lease: 2 * time.Second, batch: 8,
		parts: 1 + int(seed%9), aggs: 2 + int(seed%13), byAgg: map[string][]*orow{}, byID: map[string]*orow{},
		members: map[string]*omember{}, faults: true}
	m.owners = make([]string, m.parts)
	ctx := context.Background()
	for range 1 + int(seed%3) {
		m.startRelay("")
	}
	running := func() []*orelay {
		var out []*orelay
		for _, o := range m.relays {
			if o.state == "running" || o.state == "leaving" {
				out = append(out, o)
			}
		}
		return out
	}
	// serving are the running relays that did not find themselves
	// replaced: such a relay stays idle for good (and not ready, so its
	// orchestrator restarts or stops it), which the lifecycle does not
	// count as a relay.
	serving := func() []*orelay {
		var out []*orelay
		for _, o := range running() {
			if !o.replaced {
				out = append(out, o)
			}
		}
		return out
	}
	start := func() {
		o := m.startRelay("")
		m.logf("%s starts", o.name)
	}
	leave := func(o *orelay) {
		o.state = "leaving"
		m.logf("%s leaves", o.name)
	}
	kill := func(o *orelay) {
		o.state = "dead" // SIGKILL: its leases and membership run out
		m.logf("%s is killed", o.name)
	}
	pause := func(o *orelay) {
		o.state, o.wakeAt = "paused", m.now.Add(m.lease+time.Duration(m.rng.IntN(2000))*time.Millisecond)
		m.logf("%s is paused", o.name)
	}
	// killRestart: SIGKILL and a restart under the same relay ID, after
	// up to half a lease: no leave, no release; the presence session ends
	// with the process.
	killRestart := func(o *orelay) {
		o.state = "dead"
		m.now = m.now.Add(time.Duration(m.rng.IntN(1000)) * time.Millisecond)
		n := m.startRelay(o.member)
		m.killRestarts++
		m.logf("%s is killed, %s starts in its place", o.name, n.name)
	}
	// pauseRestart: SIGSTOP, a restart under the same relay ID while it
	// is stopped (its presence session held), and SIGCONT later: within a
	// lease (its leases, kept by the takeover, still run) or after.
	pauseRestart := func(o *orelay) {
		o.state, o.wakeAt = "paused", m.now.Add(time.Duration(m.rng.IntN(int(2*m.lease/time.Millisecond)))*time.Millisecond)
		o.restarted = true
		n := m.startRelay(o.member)
		m.pauseRestarts++
		m.logf("%s is paused, %s starts in its place, %s wakes in %v", o.name, n.name, o.name, o.wakeAt.Sub(m.now))
	}
	lifecycle := func() {
		rs := serving()
		pick := func() *orelay { return rs[m.rng.IntN(len(rs))] }
		x := m.rng.IntN(100)
		if !restarts {
			switch {
			case x < 25 && len(rs) < 4:
				start()
			case x < 45 && len(rs) > 1:
				leave(pick())
			case x < 70 && len(rs) > 1:
				kill(pick())
			case len(rs) > 1:
				pause(pick())
			}
			return
		}
		switch {
		case x < 20 && len(rs) < 4:
			start()
		case x < 35 && len(rs) > 1:
			leave(pick())
		case x < 50 && len(rs) > 1:
			kill(pick())
		case x < 62 && len(rs) > 1:
			pause(pick())
		case x < 81 && len(rs) > 0:
			killRestart(pick())
		case len(rs) > 0:
			pauseRestart(pick())
		}
	}
	step := func(inserts bool) {
		for _, o := range m.relays {
			if o.state == "paused" && !m.now.Before(o.wakeAt) {
				o.state = "running"
				m.stale += len(o.queue)
				if o.restarted && len(o.queue) > 0 {
					m.woke++
				}
				m.logf("%s wakes with %d batches", o.name, len(o.queue))
			}
		}
		switch x := m.rng.IntN(100); {
		case x < 15 && inserts:
			m.insert(1 + m.rng.IntN(6))
		case x < 85:
			if rs := running(); len(rs) > 0 {
				rs[m.rng.IntN(len(rs))].step(ctx)
			}
		case x < 99:
			m.now = m.now.Add(time.Duration(m.rng.IntN(60)) * time.Millisecond)
		default:
			m.now = m.now.Add(m.lease)
		}
		if len(m.viol) > 0 {
			for _, l := range m.trace {
				t.Log(l)
			}
			t.Fatalf("seed %d: order violated: %s", seed, m.viol[0])
		}
	}
	for i := range faultSteps {
		if i%150 == 75 {
			lifecycle()
		}
		step(true)
	}
	// Faults stop: the paused relays wake, dead letters are requeued, no
	// relay joins or leaves. Everything must be published.
	m.faults = false
	for _, o := range m.relays {
		if o.state == "paused" {
			o.state = "running"
		}
	}
	if len(serving()) == 0 {
		m.startRelay("")
	}
	m.holdsUntil = time.Time{}
	for _, r := range m.rows {
		if r.dead && !r.published {
			r.dead, r.lockedUntil, r.attempts = false, time.Time{}, 0
		}
		if !r.published && r.lockedBy == "" && r.lockedUntil.After(m.holdsUntil) {
			m.holdsUntil = r.lockedUntil // HoldsReset
		}
	}
	steps := 0
	for m.pending > 0 {
		steps++
		if steps > 20000 {
			var waiting []string
			for _, r := range m.rows {
				if !r.published {
					waiting = append(waiting, fmt.Sprintf("%s/%d part %d owner %q by %q until %+v", r.agg, r.seq, r.part, m.owners[r.part], r.lockedBy, r.lockedUntil.Sub(m.now)))
				}
			}
			t.Fatalf("seed %d: no progress: %d of %d events unpublished after %d steps without faults; members %v, relays %d: %v",
				seed, m.pending, len(m.rows), steps, m.live(), len(running()), waiting[:min(5, len(waiting))])
		}
		step(false)
	}
	return steps, m
}

func TestModelOwnershipOrderAndProgress(t *testing.T) {
	seeds := modelSeeds()
	worst, rows, relays, handovers, released, stale := 0, 0, 0, 0, 0, 0
	for seed := uint64(1); seed <= seeds; seed++ {
		steps, m := runOwnerModel(t, seed, 1500, false)
		worst = max(worst, steps)
		rows += len(m.rows)
		relays += m.next
		handovers, released, stale = handovers+m.handovers, released+m.released, stale+m.stale
	}
	if handovers == 0 || released == 0 || stale == 0 {
		t.Fatalf("the runs moved no partition (%d handovers, %d given back) or paused no relay with batches (%d): the model tests nothing", handovers, released, stale)
	}
	t.Logf("%d runs, %d events, %d relays started (joining, leaving, killed, paused at random), %d partitions taken over, %d given back, %d stale batches after pauses: every event published in order; at most %d steps after the faults stopped",
		seeds, rows, relays, handovers, released, stale, worst)
}

func modelSeeds() uint64 {
	if n, err := strconv.ParseUint(os.Getenv("OUTBOX_MODEL_SEEDS"), 10, 64); err == nil && n > 0 {
		return n
	}
	return 80
}

// The ownership model with restarts under the same relay ID besides
// (issue 29): kill and restart, pause and restart with the old process
// waking up later (see the top of this file).
//
// It found an order violation (seed 6 of the default 80): a takeover that
// kept a paused incarnation's leases gave back, in the same rebalance, the
// partitions that incarnation was giving back (idle for the new process,
// which had claimed nothing), and their new owner claimed an aggregate's
// later event while the earlier one was still leased. The claimer (and
// this model) now keep every partition the member owns busy while the
// kept leases may run, before the plan;
// claim.TestStaticTakeoverKeepsBusyThePartitionsItGivesBack shows it on
// PostgreSQL with the real Claimer.
func TestModelOwnershipRestartsUnderTheSameRelayID(t *testing.T) {
	seeds := modelSeeds()
	worst, rows := 0, 0
	var sum ownModel // the restart counters, summed
	for seed := uint64(1); seed <= seeds; seed++ {
		steps, m := runOwnerModel(t, seed, 1500, true)
		worst = max(worst, steps)
		rows += len(m.rows)
		sum.handovers += m.handovers
		sum.killRestarts += m.killRestarts
		sum.pauseRestarts += m.pauseRestarts
		sum.ended += m.ended
		sum.kept += m.kept
		sum.woke += m.woke
		sum.fenced += m.fenced
	}
	if sum.handovers == 0 || sum.killRestarts == 0 || sum.pauseRestarts == 0 || sum.ended == 0 || sum.kept == 0 || sum.woke == 0 || sum.fenced == 0 {
		t.Fatalf("%d handovers; restarts under the same relay ID: %d after a kill, %d during a pause; %d leases ended, %d takeovers kept leases, %d replaced relays woke with batches, %d rows fenced: some path was never taken, the model tests nothing there",
			sum.handovers, sum.killRestarts, sum.pauseRestarts, sum.ended, sum.kept, sum.woke, sum.fenced)
	}
	t.Logf("%d runs, %d events; restarts under the same relay ID: %d after a kill, %d during a pause; the takeovers ended %d leases of processes gone and kept those of %d; %d replaced relays woke with batches, %d of their rows fenced: every event published in order; at most %d steps after the faults stopped",
		seeds, rows, sum.killRestarts, sum.pauseRestarts, sum.ended, sum.kept, sum.woke, sum.fenced, worst)
}
