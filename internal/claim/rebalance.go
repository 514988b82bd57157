package claim

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/jackc/pgx/v5"

	"github.com/pgoutbox/outbox/internal/ownership"
)

// rebalance renews this member, reads the live members and the owners,
// and acquires and gives back partitions as Assign says. Called with c.mu
// held, before a claim.
func (c *Claimer) rebalance(ctx context.Context, now time.Time) error {
	o, st := c.own, c.st
	var j joinResult
	var members, owners []string
	var legacy string
	var b steps
	c.queueJoin(&b, &j)
	joined := &j.joinRow
	b.add(st.members.SQL, nil, func(br pgx.BatchResults) (err error) {
		members, err = collectStrings(br)
		return wrapErr("rebalance: members", err)
	})
	b.add(st.owners.SQL, nil, func(br pgx.BatchResults) (err error) {
		owners, err = readOwnerList(br, joined.Partitions)
		return wrapErr("rebalance: owners", err)
	})
	b.scan(st.legacy.SQL, nil, "rebalance", &legacy)
	if err := b.send(ctx, c.pool, "rebalance: commit"); err != nil {
		return err
	}
	partitions, gen := joined.Partitions, joined.Generation
	if !joined.Backfilled {
		return fmt.Errorf("rebalance: %w", ErrNotMigrated)
	}
	o.partitions, o.members, o.legacy, o.renewed, o.joined, o.expired = partitions, len(members), legacy, now, true, false
	o.turn = max(slices.Index(members, o.member), 0)
	blocked, replaced := o.applyStaticJoin(&j, now)
	if replaced {
		o.generation, o.seenGen = gen, gen
		return nil
	}
	if !blocked.IsZero() {
		// Every partition the member owns may hold leases the earlier
		// incarnation still runs: none is given back before they end,
		// though this incarnation has claimed nothing from it yet; and
		// the partitions owned after the plan stay as long.
		for p, who := range owners {
			if who == o.member && blocked.After(o.busyUntil[p]) {
				o.busyUntil[p] = blocked
			}
		}
		defer o.keepBusy(blocked)
	}
	clean := c.fencer == nil || c.fencer.Clean()
	plan := ownership.PlanRebalance(o.member, members, owners, func(p int) bool { return clean && o.idle(p, now) })
	if c.fencer != nil && len(plan.Acquire) > 0 {
		plan.Acquire = c.fence(ctx, plan.Acquire, owners, now)
	}
	owned := plan.Owned
	if len(plan.Acquire)+len(plan.Release) > 0 {
		if err := c.move(ctx, plan, owners, &gen); err != nil {
			return err
		}
	}
	if len(owned) != len(o.owned) {
		o.since = now
	}
	for p := range owned {
		if !o.owned[p] {
			// The floor covered only the partitions owned so far: rows
			// of this one below it may be unpublished.
			c.fl.at = 0
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
	o.setClaimMask()
	o.generation, o.seenGen = gen, gen
	return nil
}

// move acquires and gives back the partitions of plan (its Owned updated
// with what moved), owners the owner of each partition before; it sets
// *gen to the generation the move bumped, if it did and nothing else
// changed since *gen was read. Called with c.mu held.
func (c *Claimer) move(ctx context.Context, plan ownership.Plan, owners []string, gen *int64) error {
	o, q := c.own, c.st.move
	a := moveArgs{Channel: o.channel, Member: o.member, Acquire: toInt32(plan.Acquire), Release: toInt32(plan.Release), Started: o.started.Load()}
	var moved moveRow
	read := func(rows pgx.Rows, err error) error {
		if err == nil {
			moved, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[moveRow])
		}
		return err
	}
	var err error
	if o.static {
		var b steps
		c.memberShared(&b)
		b.add(q.SQL, q.Args(a), func(br pgx.BatchResults) error { return read(br.Query()) })
		err = b.send(ctx, c.pool, "commit")
	} else {
		err = read(c.pool.Query(ctx, q.SQL, q.Args(a)...))
	}
	if err != nil {
		// The database may have given this relay partitions all the
		// same (an answer lost): its claims may take their rows,
		// which the floor did not cover.
		c.fl.at = 0
		return fmt.Errorf("rebalance: acquire and release: %w", err)
	}
	var takenOver int64
	got, gave, bumped := moved.Acquired, moved.Released, moved.Generation
	for _, p := range got {
		plan.Owned[int(p)] = true
		if owners[p] != "" {
			takenOver++
		}
	}
	for _, p := range gave {
		delete(plan.Owned, int(p))
	}
	o.acquired += int64(len(got))
	o.takenOver += takenOver
	o.released += int64(len(gave))
	if bumped != nil && *bumped == *gen+1 {
		// Only this move changed members or owners since the rebalance
		// read them: the new generation is what this relay knows.
		*gen = *bumped
	}
	// Otherwise another relay changed them in between (it gave back
	// partitions assigned to this one, say): the generation read with the
	// owners stays, so the next claim finds it moved and rebalances again.
	return nil
}

// joinRow is the Join statement's result: the table's number of key
// partitions, the membership generation, and whether the key partitions'
// backfill has finished.
type joinRow struct {
	Partitions int   `db:"partitions"`
	Generation int64 `db:"generation"`
	Backfilled bool  `db:"backfilled"`
}

// joinResult is what a rebalance's join statement returns: Join's row,
// and for a static member TakeOver's (its first join) or Rejoin's.
type joinResult struct {
	joinRow
	took     *takeOverRow
	rejoined *rejoinRow
}

// queueJoin queues the member's join: Join, or for a static member
// LockMember and TakeOver at its first join and Rejoin after, read into j.
func (c *Claimer) queueJoin(b *steps, j *joinResult) {
	o, st := c.own, c.st
	readJoin := func(read func(pgx.Rows) error) func(pgx.BatchResults) error {
		return func(br pgx.BatchResults) error {
			rows, err := br.Query()
			if err == nil {
				err = read(rows)
			}
			if IsMissingTable(err) {
				return fmt.Errorf("rebalance: %w: %w", ErrNotMigrated, err)
			}
			return wrapErr("rebalance", err)
		}
	}
	switch started := o.started.Load(); {
	case o.static && started == nil:
		// A static member's first join takes its row over from an earlier
		// incarnation (TakeOver), once the claims of that one in progress
		// are done (LockMember).
		b.exec(st.lockMember.SQL, st.lockMember.Args(lockMemberArgs{TimeoutMS: takeoverWait.Milliseconds(), Key: o.memberKey, Member: o.member}), "rebalance: take over", nil)
		a := takeOverArgs{Channel: o.channel, Member: o.member, RelayID: c.cfg.RelayID, LeaseMS: c.cfg.Lease.Milliseconds(), Incarnation: o.incarnation, TableKey: c.cfg.Table}
		b.add(c.rows.takeOver.SQL, c.rows.takeOver.Args(a), readJoin(func(rows pgx.Rows) error {
			r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[takeOverRow])
			j.took, j.joinRow = &r, r.joinRow
			return err
		}))
	case o.static:
		a := rejoinArgs{Channel: o.channel, Member: o.member, RelayID: c.cfg.RelayID, LeaseMS: c.cfg.Lease.Milliseconds(), Started: started}
		b.add(st.rejoin.SQL, st.rejoin.Args(a), readJoin(func(rows pgx.Rows) error {
			r, err := pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[rejoinRow])
			j.rejoined, j.joinRow = &r, r.joinRow
			return err
		}))
	default:
		b.add(st.join.SQL, st.join.Args(joinArgs{Channel: o.channel, Member: o.member, RelayID: c.cfg.RelayID, LeaseMS: c.cfg.Lease.Milliseconds()}), readJoin(func(rows pgx.Rows) (err error) {
			j.joinRow, err = pgx.CollectExactlyOneRow(rows, pgx.RowToStructByName[joinRow])
			return err
		}))
	}
}

// applyStaticJoin applies a static member's join at now: replaced when a
// later incarnation holds the row (the member then owns and claims nothing
// more); blocked, if not zero, is until when an earlier incarnation's
// leases kept by a takeover may run (local clock): the claims run the
// order guard against them until then.
func (o *owner) applyStaticJoin(j *joinResult, now time.Time) (blocked time.Time, replaced bool) {
	switch {
	case j.rejoined != nil && j.rejoined.StartedAt == nil:
		// A later process with this relay ID took the row over: its
		// partitions are that one's now.
		o.replaced = true
		o.owned = map[int]bool{}
		clear(o.releasing)
		o.setClaimMask()
		o.since = now
		return time.Time{}, true
	case j.rejoined != nil:
		o.started.Store(j.rejoined.StartedAt)
	case j.took != nil:
		o.started.Store(j.took.StartedAt)
		o.takeoverEnded += j.took.Ended
		if j.took.BlockedMS != nil {
			left := time.Duration(*j.took.BlockedMS) * time.Millisecond
			blocked = now.Add(left + time.Second)
			o.takeoverBlocked = time.Now().Add(left)
			o.oldKeys["takeover"] = blocked
		}
	}
	return blocked, false
}

// keepBusy keeps every partition owned busy until at least until, so that
// none is given back while leases it cannot see the end of may run.
func (o *owner) keepBusy(until time.Time) {
	for p := range o.owned {
		if until.After(o.busyUntil[p]) {
			o.busyUntil[p] = until
		}
	}
}

// takeoverWait is how long a static member's first join waits for the
// claims in progress of an earlier incarnation (LockMember); one paused in
// the middle of sending a claim keeps it waiting, and the join fails and
// is tried again at the next claim, until that incarnation's membership
// ends (then LockMember takes no lock).
const takeoverWait = 2 * time.Second

// takeOverRow is the TakeOver statement's result (sql/membership.sql).
type takeOverRow struct {
	joinRow
	StartedAt *time.Time `db:"started_at"`
	BlockedMS *int64     `db:"blocked_ms"`
	Ended     int64      `db:"ended"`
}

// rejoinRow is the Rejoin statement's result: StartedAt nil when a later
// incarnation holds the row.
type rejoinRow struct {
	joinRow
	StartedAt *time.Time `db:"started_at"`
}

// memberShared queues, for a static member, the shared member lock that
// serializes its statements with a later incarnation's takeover
// (MemberShared).
func (c *Claimer) memberShared(b *steps) {
	if c.own.static {
		b.exec(c.st.memberShared.SQL, c.st.memberShared.Args(keyArgs{Key: c.own.memberKey}), "member lock", nil)
	}
}

// moveRow is the Move statement's result: the partitions acquired and
// released, and the generation the move bumped (nil: it moved nothing).
type moveRow struct {
	Acquired   []int32 `db:"acquired"`
	Released   []int32 `db:"released"`
	Generation *int64  `db:"generation"`
}

// ownerRow is a row of the Owners statement: a key partition and its
// owner ("" for nobody).
type ownerRow struct {
	Partition int    `db:"partition"`
	Owner     string `db:"owner"`
}

// readOwnerList reads owners.SQL's result: the owner of each of the
// table's partitions key partitions, in order.
func readOwnerList(br pgx.BatchResults, partitions int) ([]string, error) {
	rows, err := br.Query()
	if err != nil {
		return nil, err
	}
	list, err := pgx.CollectRows(rows, pgx.RowToStructByName[ownerRow])
	if err != nil {
		return nil, err
	}
	owners := make([]string, 0, partitions)
	for _, o := range list {
		owners = append(owners, o.Owner)
	}
	return owners, nil
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
	if o.replaced {
		// The row and the partitions are a later incarnation's.
		o.owned = map[int]bool{}
		o.setClaimMask()
		o.joined = false
		return nil
	}
	q := c.st.leave
	a := leaveArgs{Channel: o.channel, Member: o.member, Keep: keep, Gone: len(keep) == 0, Started: o.started.Load()}
	var err error
	if o.static {
		var b steps
		c.memberShared(&b)
		b.exec(q.SQL, q.Args(a), "", nil)
		err = b.send(ctx, c.pool, "commit")
	} else {
		_, err = c.pool.Exec(ctx, q.SQL, q.Args(a)...)
	}
	if err != nil {
		return fmt.Errorf("leave: %w", err)
	}
	o.released += int64(len(o.owned) - len(keep))
	o.owned = map[int]bool{}
	for _, p := range keep {
		o.owned[int(p)] = true
	}
	o.setClaimMask()
	o.joined = false
	return nil
}
