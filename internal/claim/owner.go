package claim

import (
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
)

// Ownership of key partitions (migration 00009).
//
// Every row belongs to one key partition (outbox.KeyPartition of its
// aggregate ID) and every partition to at most one relay at a time, its
// owner; a claim takes only rows of the partitions its relay owns. So the
// events of one aggregate are only ever claimed by one relay, no claim
// waits for another relay's, and no claim steps over rows another relay
// holds: several relays share a backlog instead of contending for it.
//
// Relays are members: a row in <table>_relays per process (Claimer.Member),
// whose until it renews to now() + Config.Lease every renewEvery. Every
// lease the relay gives a row ends no later than its until (a claim leases
// least(now() + lease, until)), so once a member's until has passed, none
// of the rows it leased is leased any more, and its partitions may change
// hands without any event of theirs overtaking an earlier one still in
// flight: a dead relay's partitions are taken over within one lease.
//
// Which member owns which partition is Assign of the live members (until
// in the future): every relay computes the same assignment. A relay
// acquires the partitions assigned to it that are free (no owner, or an
// owner whose until has passed); it gives back the partitions assigned to
// another member once no batch it claimed from them is unsettled: it
// claims no more rows from such a partition (releasing), waits for its
// pipeline to publish or give back what it holds of it (Settled), then
// sets the owner to nobody, and the assigned member acquires it at its
// next claim. A generation counter in <table>_partitioning, bumped by
// every change of members or owners and read by every claim, makes every
// relay rebalance at its next claim after a change.
//
// A claim also checks, in its own statement, that its member is live and
// that the generation is still the one at which the relay last found what
// it owns (sql/claim.SQL), so a relay that lost its ownership (paused past
// its until, cut off from the database) claims nothing from partitions
// that moved; its late marks and releases are fenced by their claim token
// as before.

// renewEvery is how often a member renews its until, as a fraction of the
// lease: leases end at the latest with until, so just before a renewal
// they are at least 5/6 of Config.Lease long.
const renewEvery = 6

// Ownership is what a Claimer owns, for health checks, metrics and logs.
type Ownership struct {
	// Member is the Claimer's member name in <table>_relays.
	Member string
	// Partitions is the table's number of key partitions; 0 before the
	// first rebalance.
	Partitions int
	// Owned counts the partitions this Claimer owns, Releasing those of
	// them it gives back as soon as nothing it claimed from them is
	// unsettled.
	Owned, Releasing int
	// Members is the number of live relays on the table.
	Members int
	// Turn is this member's place among the live members in name order
	// (0 to Members-1; 0 while it is not among them): relays with
	// notifications take turns at the fallback poll by it, each polling
	// for all (Claimer.PollShared).
	Turn int
	// Acquired and Released count partitions acquired and given back
	// since the Claimer started; TakenOver counts those acquired from
	// another member whose membership had run out (a handover): a
	// partition a member gave back has no owner when it is acquired.
	Acquired, Released, TakenOver int64
	// FenceFailures counts the partitions left to a later rebalance
	// because their former owner could not be fenced (SetFencer): the
	// transaction coordinator did not answer.
	FenceFailures int64
	// Legacy names a relay of an older version, without key partitions,
	// that holds leases on the table (its locked_by); "" when none. While
	// one runs, this Claimer claims nothing: it would not know that
	// relay's leases.
	Legacy string
	// Since is when Owned last changed.
	Since time.Time
	// Static says the member is its relay ID (lease.Config.RelayID set):
	// a later process with the same relay ID takes its row and
	// partitions over at once (TakeOver in sql/membership.sql).
	Static bool
	// Replaced says a later process with the same relay ID took this
	// one's membership over: this Claimer claims nothing any more, for
	// good (restart the process if that is what you want).
	Replaced bool
	// TakeoverBlocked is until when rows an earlier incarnation of this
	// relay ID leased stay leased (it may be paused, not dead, and
	// publish them still): their aggregates' later events wait until then.
	// Zero when no takeover kept any.
	TakeoverBlocked time.Time
	// TakeoverEnded counts the leases of earlier incarnations whose
	// process was gone that the takeover ended.
	TakeoverEnded int64
}

// owner is a Claimer's ownership state; guarded by Claimer.mu.
type owner struct {
	member     string
	partitions int
	owned      map[int]bool
	releasing  map[int]bool
	// claimMask is what a claim takes rows of, indexed by partition: the
	// partitions owned less those being given back, set by setClaimMask
	// whenever owned or releasing change; claimsAny whether any is true.
	claimMask []bool
	claimsAny bool
	// wakeMask is owned as a mask indexed by partition (nil before the
	// first rebalance), read without Claimer.mu by Wants.
	wakeMask atomic.Pointer[[]bool]
	// channel is where a change of members or owners is announced
	// (SetWakeChannel); "" announces nothing.
	channel                       string
	members                       int
	turn                          int // Ownership.Turn
	legacy                        string
	generation                    int64 // at the last rebalance
	seenGen                       int64 // read by the last claim
	expired                       bool  // the last claim saw a member whose until has passed
	renewed                       time.Time
	joined                        bool
	holders                       int // holders taken after failed claims (Claimer.newHolder)
	since                         time.Time
	acquired, released, takenOver int64
	fenceFailures                 int64
	// refenceAt, when set, is when the next claim rebalances again to take
	// the partitions whose former owner could not be fenced (fence).
	refenceAt time.Time
	// busy counts, per partition, the unsettled batches holding its rows;
	// busyUntil keeps a partition busy until then (rows stuck in a lease,
	// or a claim whose answer was lost).
	busy      map[int]int
	busyUntil map[int]time.Time
	// batches are the partitions of each unsettled batch, by token.
	batches map[uuid.UUID][]int
	// oldKeys are the order-guard keys of this Claimer's earlier holders
	// (after a failed claim) with when their leases end at the latest.
	oldKeys map[string]time.Time

	// Static membership (lease.Config.RelayID set): member is the relay
	// ID, incarnation this process's holder prefix (member/<8 hex>),
	// started the started_at of its row (nil before it joined: its first
	// join is a takeover; read without Claimer.mu by Extend), replaced set
	// once a later incarnation took the row over. memberKey names the
	// advisory lock its claims hold shared.
	static          bool
	incarnation     string
	memberKey       string
	started         atomic.Pointer[time.Time]
	replaced        bool
	takeoverBlocked time.Time
	takeoverEnded   int64
}

func newOwner(member string) *owner {
	return &owner{member: member, owned: map[int]bool{}, releasing: map[int]bool{}, busy: map[int]int{},
		busyUntil: map[int]time.Time{}, batches: map[uuid.UUID][]int{}, oldKeys: map[string]time.Time{}}
}

// Member is this Claimer's member name in <table>_relays: Config.RelayID
// and a suffix of its own, which is also the holder in locked_by until a
// claim fails (Holder); or, for a static member (Config.RelayID set),
// Config.RelayID alone, with a holder of its own (Holder).
func (c *Claimer) Member() string { return c.own.member }

// Ownership returns what the Claimer owns now.
func (c *Claimer) Ownership() Ownership {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.own
	return Ownership{Member: o.member, Partitions: o.partitions, Owned: len(o.owned), Releasing: len(o.releasing),
		Members: o.members, Turn: o.turn, Acquired: o.acquired, Released: o.released, TakenOver: o.takenOver, FenceFailures: o.fenceFailures, Legacy: o.legacy, Since: o.since,
		Static: o.static, Replaced: o.replaced, TakeoverBlocked: o.takeoverBlocked, TakeoverEnded: o.takeoverEnded}
}

// Settled tells the Claimer that the relay is done with the batch of
// token: every row published (its mark queued), given back or
// dead-lettered. Rows it could not give back stay leased until busyUntil
// (zero: none). A partition is given back to its new owner only once no
// unsettled batch holds rows of it. Settled does not wait for a claim in
// progress: it queues the news, which the next claim (or Close) applies
// before it rebalances, so the relay's publisher never waits for its
// claimer's round trip.
func (c *Claimer) Settled(token uuid.UUID, busyUntil time.Time) {
	c.settled.push(settledBatch{token: token, busyUntil: busyUntil})
}

// settleQueue holds the calls of Settled until the next claim applies
// them. It has a lock of its own, not Claimer.mu, which a claim holds for
// its round trip: Settled never waits for one.
type settleQueue struct {
	mu      sync.Mutex
	pending []settledBatch
}

func (q *settleQueue) push(s settledBatch) {
	q.mu.Lock()
	q.pending = append(q.pending, s)
	q.mu.Unlock()
}

// take returns the queued calls and empties the queue.
func (q *settleQueue) take() []settledBatch {
	q.mu.Lock()
	defer q.mu.Unlock()
	p := q.pending
	q.pending = nil
	return p
}

// settledBatch is a call of Settled not applied yet.
type settledBatch struct {
	token     uuid.UUID
	busyUntil time.Time
}

// applySettled applies the calls of Settled queued since the last time.
// Called with c.mu held.
func (c *Claimer) applySettled() {
	q := c.settled.take()
	o := c.own
	for _, s := range q {
		if s.busyUntil.After(c.stuckUntil) {
			c.stuckUntil = s.busyUntil
		}
		for _, p := range o.batches[s.token] {
			if o.busy[p]--; o.busy[p] <= 0 {
				delete(o.busy, p)
			}
			if s.busyUntil.After(o.busyUntil[p]) {
				o.busyUntil[p] = s.busyUntil
			}
		}
		delete(o.batches, s.token)
	}
}

// track records the partitions of a claimed batch as busy.
func (o *owner) track(b *Batch) {
	if len(b.Rows) == 0 {
		return
	}
	var ps []int
	for i := range b.Rows {
		ps = append(ps, b.Rows[i].KeyPartition)
	}
	slices.Sort(ps)
	ps = slices.Compact(ps)
	for _, p := range ps {
		o.busy[p]++
	}
	o.batches[b.Token] = ps
}

// idle reports whether partition p holds nothing this relay claimed and
// has not settled, at now.
func (o *owner) idle(p int, now time.Time) bool {
	if o.busy[p] > 0 {
		return false
	}
	if u, ok := o.busyUntil[p]; ok {
		if now.Before(u) {
			return false
		}
		delete(o.busyUntil, p)
	}
	return true
}

// lostClaim records a claim whose outcome is unknown (it may have
// committed): its rows could be in any owned partition, leased under the
// old holder until now + lease at the latest.
func (o *owner) lostClaim(oldHolder string, until time.Time) {
	o.oldKeys["relay:"+oldHolder] = until
	for p := range o.owned {
		if until.After(o.busyUntil[p]) {
			o.busyUntil[p] = until
		}
	}
}

// guardKeys returns the order-guard keys of earlier holders whose leases
// may still run: a claim must respect those leases like another relay's.
func (o *owner) guardKeys(now time.Time) []string {
	keys := []string{}
	for k, until := range o.oldKeys {
		if now.After(until) {
			delete(o.oldKeys, k)
			continue
		}
		keys = append(keys, k)
	}
	return keys
}

// ownedMask is the floor's view of the partitions owned (sql/advance.SQL): one
// bool per key partition, true for those owned; nil (every row counts)
// before the first rebalance.
func (o *owner) ownedMask() []bool {
	if o.partitions == 0 {
		return nil
	}
	m := make([]bool, o.partitions)
	for p := range o.owned {
		if p >= 0 && p < len(m) {
			m[p] = true
		}
	}
	return m
}

// releasingList returns the partitions being given back.
// setClaimMask sets claimMask and claimsAny from owned and releasing.
func (o *owner) setClaimMask() {
	m := make([]bool, o.partitions)
	any := false
	for p := range o.owned {
		if p >= 0 && p < len(m) && !o.releasing[p] {
			m[p], any = true, true
		}
	}
	o.claimMask, o.claimsAny = m, any
	w := make([]bool, o.partitions)
	for p := range o.owned {
		if p >= 0 && p < len(w) {
			w[p] = true
		}
	}
	o.wakeMask.Store(&w)
}

// SetWakeChannel makes every change of members or owners this Claimer
// makes (a join, a move of partitions, a leave, the removal of an expired
// member) notify channel, the relays' LISTEN channel, with
// config.MembersPayload, so that every relay rebalances at once, not only at its next
// claim: a relay whose listener ignores notifications of partitions it
// does not own (Wants) may not claim again before its next poll. Call it
// before the first claim; "" (the default) notifies nothing. A shared
// poll (PollShared) notifies it too.
func (c *Claimer) SetWakeChannel(channel string) { c.own.channel = channel }

// Wants reports whether this Claimer owns key partition p (those it is
// giving back included): a notification that names only partitions it
// does not own need not wake its relay. True before the first rebalance
// and for a p out of the table's range. Safe for concurrent use; the
// owned set changes before the claim that follows a rebalance starts, so
// a notification of a row committed after that claim began is judged by
// the new set.
func (c *Claimer) Wants(p int) bool {
	m := c.own.wakeMask.Load()
	if m == nil || p >= len(*m) {
		return true
	}
	return (*m)[p]
}

// rebalanceDue reports whether the next claim should rebalance first.
func (o *owner) rebalanceDue(now time.Time, lease time.Duration) bool {
	switch {
	case o.replaced:
		return false
	case !o.joined, o.seenGen != o.generation, o.expired, now.Sub(o.renewed) >= lease/renewEvery:
		return true
	case !o.refenceAt.IsZero() && !now.Before(o.refenceAt):
		return true
	}
	for p := range o.releasing {
		if o.idle(p, now) {
			return true
		}
	}
	return false
}
