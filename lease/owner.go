package lease

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/google/uuid"
	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/sqlname"
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
// owns each partition it takes rows from, so a relay that lost its
// ownership (paused past its until, cut off from the database) claims
// nothing from partitions that moved; its late marks and releases are
// fenced by their claim token as before.

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
	// Acquired and Released count partitions acquired and given back
	// since the Claimer started; TakenOver counts those acquired from
	// another member (a handover).
	Acquired, Released, TakenOver int64
	// Legacy names a relay of an older version, without key partitions,
	// that holds leases on the table (its locked_by); "" when none. While
	// one runs, this Claimer claims nothing: it would not know that
	// relay's leases.
	Legacy string
	// Since is when Owned last changed.
	Since time.Time
}

// owner is a Claimer's ownership state; guarded by Claimer.mu.
type owner struct {
	member                        string
	partitions                    int
	owned                         map[int]bool
	releasing                     map[int]bool
	members                       int
	legacy                        string
	generation                    int64 // at the last rebalance
	seenGen                       int64 // read by the last claim
	expired                       bool  // the last claim saw a member whose until has passed
	renewed                       time.Time
	joined                        bool
	holders                       int // holders taken after failed claims (Claimer.newHolder)
	since                         time.Time
	acquired, released, takenOver int64
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
}

func newOwner(member string) *owner {
	return &owner{member: member, owned: map[int]bool{}, releasing: map[int]bool{}, busy: map[int]int{},
		busyUntil: map[int]time.Time{}, batches: map[uuid.UUID][]int{}, oldKeys: map[string]time.Time{}}
}

// Member is this Claimer's member name in <table>_relays: Config.RelayID
// and a suffix of its own; it is also the holder in locked_by until a claim
// fails (Holder).
func (c *Claimer) Member() string { return c.own.member }

// Ownership returns what the Claimer owns now.
func (c *Claimer) Ownership() Ownership {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.own
	return Ownership{Member: o.member, Partitions: o.partitions, Owned: len(o.owned), Releasing: len(o.releasing),
		Members: o.members, Acquired: o.acquired, Released: o.released, TakenOver: o.takenOver, Legacy: o.legacy, Since: o.since}
}

// Settled tells the Claimer that the relay is done with the batch of
// token: every row published (its mark queued), given back or
// dead-lettered. Rows it could not give back stay leased until busyUntil
// (zero: none). A partition is given back to its new owner only once no
// unsettled batch holds rows of it.
func (c *Claimer) Settled(token uuid.UUID, busyUntil time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	o := c.own
	if busyUntil.After(c.stuckUntil) {
		c.stuckUntil = busyUntil
	}
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

// ownedMask is the floor's view of the partitions owned (advanceSQL): one
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
func (o *owner) releasingList() []int32 {
	out := make([]int32, 0, len(o.releasing))
	for p := range o.releasing {
		out = append(out, int32(p))
	}
	return out
}

// rebalanceDue reports whether the next claim should rebalance first.
func (o *owner) rebalanceDue(now time.Time, lease time.Duration) bool {
	switch {
	case !o.joined, o.seenGen != o.generation, o.expired, now.Sub(o.renewed) >= lease/renewEvery:
		return true
	}
	for p := range o.releasing {
		if o.idle(p, now) {
			return true
		}
	}
	return false
}

// prepareOwner writes the ownership statements.
func (c *Claimer) prepareOwner() {
	t := sqlname.Quote(c.cfg.Table)
	relays, parts, meta := sqlname.Beside(c.cfg.Table, "_relays"), sqlname.Beside(c.cfg.Table, "_partitions"), sqlname.Beside(c.cfg.Table, "_partitioning")
	c.keyPartition = `coalesce(o.key_partition, ` + sqlname.Beside(c.cfg.Table, "_key_partition") + `(o.` + sqlname.Column(c.cfg.Columns.AggregateID) + `::text))`
	// The heartbeat: members whose until has passed are removed (their
	// partitions are free), this one joins or renews, and a join or a
	// removal bumps the generation so that every relay rebalances.
	c.joinSQL = `WITH expired AS (
  DELETE FROM ` + relays + ` WHERE until <= now() AND member <> $1 RETURNING member
), me AS (
  INSERT INTO ` + relays + ` (member, relay_id, until) VALUES ($1, $2, now() + $3 * interval '1 millisecond')
  ON CONFLICT (member) DO UPDATE SET until = EXCLUDED.until, renewed_at = now()
  RETURNING (xmax = 0) AS joined
), bump AS (
  UPDATE ` + meta + ` SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM expired) OR (SELECT joined FROM me)
  RETURNING generation
)
SELECT m.partitions, coalesce((SELECT generation FROM bump), m.generation), m.backfilled_at IS NOT NULL
FROM ` + meta + ` m`
	c.membersSQL = `SELECT member FROM ` + relays + ` WHERE until > now() ORDER BY member`
	c.ownersSQL = `SELECT partition, coalesce(owner, '') FROM ` + parts + ` ORDER BY partition`
	// A relay of an older version registers its holders in the order
	// guard as 'relay:<holder>' too, but is no member.
	c.legacySQL = `SELECT coalesce((SELECT substr(g.key, 7) FROM ` + c.guard + ` g
  WHERE g.key LIKE 'relay:%' AND g.until > now()
    AND NOT EXISTS (SELECT 1 FROM ` + relays + ` r WHERE g.key = 'relay:' || r.member OR g.key LIKE 'relay:' || r.member || '.%')
    AND EXISTS (SELECT 1 FROM ` + t + ` o WHERE o.published_at IS NULL AND o.locked_by = substr(g.key, 7) AND o.locked_until > now())
  LIMIT 1), '')`
	// Acquire the free partitions assigned to this member (no owner, or
	// an owner that is no live member), give back those it may, and bump
	// the generation if anything changed hands.
	c.moveSQL = `WITH acquired AS (
  UPDATE ` + parts + ` p SET owner = $1, epoch = p.epoch + 1, since = now(),
    handovers = p.handovers + CASE WHEN p.owner IS NULL THEN 0 ELSE 1 END
  WHERE p.partition = ANY($2::int[])
    AND (p.owner IS NULL OR NOT EXISTS (SELECT 1 FROM ` + relays + ` r WHERE r.member = p.owner AND r.until > now()))
  RETURNING p.partition
), released AS (
  UPDATE ` + parts + ` p SET owner = NULL, since = now()
  WHERE p.partition = ANY($3::int[]) AND p.owner = $1
  RETURNING p.partition
), bump AS (
  UPDATE ` + meta + ` SET generation = generation + 1
  WHERE EXISTS (SELECT 1 FROM acquired) OR EXISTS (SELECT 1 FROM released)
  RETURNING generation
)
SELECT coalesce((SELECT array_agg(partition) FROM acquired), '{}'),
       coalesce((SELECT array_agg(partition) FROM released), '{}'),
       (SELECT generation FROM bump)`
	c.leaveSQL = `WITH released AS (
  UPDATE ` + parts + ` SET owner = NULL, since = now() WHERE owner = $1 AND NOT (partition = ANY($2::int[])) RETURNING partition
), gone AS (
  DELETE FROM ` + relays + ` WHERE member = $1 AND $3 RETURNING member
)
UPDATE ` + meta + ` SET generation = generation + 1
WHERE EXISTS (SELECT 1 FROM released) OR EXISTS (SELECT 1 FROM gone)`
}

// ErrNotMigrated is wrapped by claims on a table that migration 00009
// (key partitions) has not reached or whose backfill has not finished:
// run `outbox-relay migrate`.
var ErrNotMigrated = fmt.Errorf("the outbox table has no key partitions yet: run `outbox-relay migrate` (it adds them and fills them in)")

// CheckPartitions returns an error wrapping ErrNotMigrated when table
// (optionally schema-qualified) has no key partitions yet (migration 00009
// has not run) or their backfill has not finished; nil when it is ready.
// Other errors are the database's, wrapped as "check key partitions: ...".
func CheckPartitions(ctx context.Context, db interface {
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, table string) error {
	var done bool
	err := db.QueryRow(ctx, `SELECT backfilled_at IS NOT NULL FROM `+sqlname.Beside(table, "_partitioning")).Scan(&done)
	switch {
	case IsMissingTable(err), err == nil && !done, errors.Is(err, pgx.ErrNoRows):
		return fmt.Errorf("table %s: %w", table, ErrNotMigrated)
	case err != nil:
		return fmt.Errorf("check key partitions: %w", err)
	}
	return nil
}

// rebalance renews this member, reads the live members and the owners,
// and acquires and gives back partitions as Assign says. Called with c.mu
// held, before a claim.
func (c *Claimer) rebalance(ctx context.Context, now time.Time) error {
	o := c.own
	b := &pgx.Batch{}
	b.Queue(c.joinSQL, o.member, c.cfg.RelayID, c.cfg.Lease.Milliseconds())
	b.Queue(c.membersSQL)
	b.Queue(c.ownersSQL)
	b.Queue(c.legacySQL)
	br := c.pool.SendBatch(ctx, b)
	var partitions int
	var gen int64
	var backfilled bool
	err := br.QueryRow().Scan(&partitions, &gen, &backfilled)
	if err != nil {
		br.Close()
		if IsMissingTable(err) {
			return fmt.Errorf("rebalance: %w: %w", ErrNotMigrated, err)
		}
		return fmt.Errorf("rebalance: %w", err)
	}
	members, err := collectStrings(br)
	if err != nil {
		br.Close()
		return fmt.Errorf("rebalance: members: %w", err)
	}
	rows, err := br.Query()
	if err != nil {
		br.Close()
		return fmt.Errorf("rebalance: owners: %w", err)
	}
	owners := make([]string, 0, partitions)
	for rows.Next() {
		var p int
		var who string
		if err := rows.Scan(&p, &who); err != nil {
			rows.Close()
			br.Close()
			return fmt.Errorf("rebalance: owners: %w", err)
		}
		owners = append(owners, who)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		br.Close()
		return fmt.Errorf("rebalance: owners: %w", err)
	}
	var legacy string
	if err := br.QueryRow().Scan(&legacy); err != nil {
		br.Close()
		return fmt.Errorf("rebalance: %w", err)
	}
	if err := br.Close(); err != nil {
		return fmt.Errorf("rebalance: commit: %w", err)
	}
	if !backfilled {
		return fmt.Errorf("rebalance: %w", ErrNotMigrated)
	}
	o.partitions, o.members, o.legacy, o.renewed, o.joined, o.expired = partitions, len(members), legacy, now, true, false
	plan := PlanRebalance(o.member, members, owners, func(p int) bool { return o.idle(p, now) })
	owned := plan.Owned
	acquire, release := toInt32(plan.Acquire), toInt32(plan.Release)
	if len(acquire)+len(release) > 0 {
		var got, gave []int32
		var bumped *int64
		if err := c.pool.QueryRow(ctx, c.moveSQL, o.member, acquire, release).Scan(&got, &gave, &bumped); err != nil {
			// The database may have given this relay partitions all the
			// same (an answer lost): its claims may take their rows,
			// which the floor did not cover.
			c.floor = 0
			return fmt.Errorf("rebalance: acquire and release: %w", err)
		}
		var takenOver int64
		for _, p := range got {
			owned[int(p)] = true
			if owners[p] != "" {
				takenOver++
			}
		}
		for _, p := range gave {
			delete(owned, int(p))
		}
		o.acquired += int64(len(got))
		o.takenOver += takenOver
		o.released += int64(len(gave))
		if bumped != nil {
			gen = *bumped
		}
	}
	if len(owned) != len(o.owned) {
		o.since = now
	}
	for p := range owned {
		if !o.owned[p] {
			// The floor covered only the partitions owned so far: rows
			// of this one below it may be unpublished.
			c.floor = 0
			break
		}
	}
	o.owned = owned
	clear(o.releasing)
	for p := range plan.Releasing {
		if owned[p] {
			o.releasing[p] = true
		}
	}
	o.generation, o.seenGen = gen, gen
	return nil
}

// Plan is what one rebalance of a member does (PlanRebalance).
type Plan struct {
	// Acquire are the partitions assigned to the member that nobody live
	// owns; Release those it owns, assigned to another member, that are
	// idle (nothing of them unsettled).
	Acquire, Release []int
	// Owned are the partitions the member owns before the rebalance's
	// statements run; Releasing those of them assigned to another member
	// (it claims no rows from them).
	Owned, Releasing map[int]bool
}

// PlanRebalance decides one rebalance of member: live are the live
// members, owners the owner of each partition ("" for nobody; a member not
// in live owns nothing any more: its membership ran out, so none of its
// leases runs), idle whether the member holds nothing unsettled of a
// partition. The member acquires the partitions Assign gives it that nobody
// live owns, and gives back the idle partitions Assign gives another
// member; it keeps claiming from none of those. It is a pure function, the
// one the Claimer and the relay's model test both use.
func PlanRebalance(member string, live, owners []string, idle func(p int) bool) Plan {
	assigned := Assign(live, len(owners))
	isLive := make(map[string]bool, len(live))
	for _, m := range live {
		isLive[m] = true
	}
	plan := Plan{Owned: map[int]bool{}, Releasing: map[int]bool{}}
	for p, who := range owners {
		mine := p < len(assigned) && assigned[p] == member
		switch {
		case who == member && mine:
			plan.Owned[p] = true
		case who == member:
			plan.Owned[p] = true
			plan.Releasing[p] = true
			if idle(p) {
				plan.Release = append(plan.Release, p)
			}
		case mine && (who == "" || !isLive[who]):
			plan.Acquire = append(plan.Acquire, p)
		}
	}
	return plan
}

func toInt32(ps []int) []int32 {
	out := make([]int32, len(ps))
	for i, p := range ps {
		out[i] = int32(p)
	}
	return out
}

func collectStrings(br pgx.BatchResults) ([]string, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	return pgx.CollectRows(rows, pgx.RowTo[string])
}

// leave gives back every partition nothing is in flight in and, when none
// is left busy, removes this member, so that the other relays take its
// partitions at once. Called with c.mu held.
func (c *Claimer) leave(ctx context.Context) error {
	o := c.own
	if !o.joined {
		return nil
	}
	now := time.Now()
	var keep []int32
	for p := range o.owned {
		if !o.idle(p, now) {
			keep = append(keep, int32(p))
		}
	}
	if keep == nil {
		keep = []int32{}
	}
	if _, err := c.pool.Exec(ctx, c.leaveSQL, o.member, keep, len(keep) == 0); err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	o.released += int64(len(o.owned) - len(keep))
	o.owned = map[int]bool{}
	for _, p := range keep {
		o.owned[int(p)] = true
	}
	o.joined = false
	return nil
}

// Owners is who owns the table's key partitions, as `outbox-relay status`
// shows it.
type Owners struct {
	// Partitions is the table's number of key partitions.
	Partitions int `json:"partitions"`
	// Relays are the members, live or whose membership ran out (they are
	// removed at the next rebalance), by member name.
	Relays []MemberOwnership `json:"relays"`
	// Free lists the partitions nobody owns.
	Free []int `json:"free"`
}

// MemberOwnership is one member of Owners.
type MemberOwnership struct {
	Member    string    `json:"member"`
	RelayID   string    `json:"relay_id"`
	StartedAt time.Time `json:"started_at"`
	RenewedAt time.Time `json:"renewed_at"`
	// Until is when its membership ends unless renewed; Live whether that
	// is still ahead (by the database clock).
	Until time.Time `json:"until"`
	Live  bool      `json:"live"`
	// Owned are the partitions it owns, since the earliest of Since.
	Owned []int     `json:"owned"`
	Since time.Time `json:"since,omitzero"`
}

// ReadOwners reads who owns table's key partitions (optionally
// schema-qualified). It returns an error wrapping ErrNotMigrated for a
// table without key partitions.
func ReadOwners(ctx context.Context, db interface {
	Query(ctx context.Context, sql string, args ...any) (pgx.Rows, error)
	QueryRow(ctx context.Context, sql string, args ...any) pgx.Row
}, table string) (*Owners, error) {
	if err := CheckPartitions(ctx, db, table); err != nil {
		return nil, err
	}
	relays, parts, meta := sqlname.Beside(table, "_relays"), sqlname.Beside(table, "_partitions"), sqlname.Beside(table, "_partitioning")
	o := &Owners{Relays: []MemberOwnership{}, Free: []int{}}
	if err := db.QueryRow(ctx, `SELECT partitions FROM `+meta).Scan(&o.Partitions); err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	rows, err := db.Query(ctx, `SELECT member, relay_id, started_at, renewed_at, until, until > now() FROM `+relays+` ORDER BY member`)
	if err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	index := map[string]int{}
	for rows.Next() {
		var m MemberOwnership
		if err := rows.Scan(&m.Member, &m.RelayID, &m.StartedAt, &m.RenewedAt, &m.Until, &m.Live); err != nil {
			rows.Close()
			return nil, fmt.Errorf("read owners: %w", err)
		}
		m.Owned = []int{}
		index[m.Member] = len(o.Relays)
		o.Relays = append(o.Relays, m)
	}
	rows.Close()
	if err := rows.Err(); err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	rows, err = db.Query(ctx, `SELECT partition, coalesce(owner, ''), since FROM `+parts+` ORDER BY partition`)
	if err != nil {
		return nil, fmt.Errorf("read owners: %w", err)
	}
	defer rows.Close()
	for rows.Next() {
		var p int
		var who string
		var since *time.Time
		if err := rows.Scan(&p, &who, &since); err != nil {
			return nil, fmt.Errorf("read owners: %w", err)
		}
		i, ok := index[who]
		if !ok {
			o.Free = append(o.Free, p)
			continue
		}
		m := &o.Relays[i]
		m.Owned = append(m.Owned, p)
		if since != nil && (m.Since.IsZero() || since.Before(m.Since)) {
			m.Since = *since
		}
	}
	return o, rows.Err()
}

// Settled reports whether ownership is at rest: at least one member is
// live, and every partition is owned by the live member that Assign gives
// it among the live members, so no handover is pending. Relays that
// joined or left a moment ago make it false until the rebalances they
// cause are done (a few heartbeats; see Config.Lease).
func (o *Owners) Settled() bool {
	var live []string
	for _, m := range o.Relays {
		if m.Live {
			live = append(live, m.Member)
		}
	}
	want := Assign(live, o.Partitions)
	if want == nil {
		return false
	}
	have := make([]string, o.Partitions)
	for _, m := range o.Relays {
		for _, p := range m.Owned {
			if p >= 0 && p < len(have) {
				have[p] = m.Member
			}
		}
	}
	return slices.Equal(want, have)
}
