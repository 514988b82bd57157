package metrics

import (
	"slices"
	"sync"
	"time"

	"github.com/pgoutbox/outbox/internal/claim"
)

// The age gauges between refreshes. A refresh reads the lowest-seq
// unpublished, live rows (up to headRows of them, with their created_at)
// and the lowest-seq claimable one; the relay tells Metrics what Kafka
// acknowledged (Published, relay.Observer), and a published row leaves the
// refresh's view at once: outbox_oldest_unpublished_age_seconds becomes
// the age of the next row the refresh saw, or 0 when the refresh saw them
// all. Before, the gauge kept growing after the relay had published the
// backlog until the next refresh (7.85 s in issue 20's run, one second
// after the last event arrived).
//
// When the relay has published every row the refresh saw and there were
// more, the next ones are unknown: the gauge shows the age of the last row
// the refresh saw (the rows after it were inserted later, and their
// transactions usually began later too), and Metrics asks the refresher
// for a refresh now, at most one per minRefreshGap and within the gauges'
// duty cycle (refreshDutyCycle). A published claimable row makes the
// claimable age 0 until the next refresh (and asks for one the same way
// when the refresh did not see every row). Only the relay's own publishes
// are seen; rows other relays publish leave at the next refresh, as before.

// minRefreshGap is the shortest time between the starts of two refreshes
// when Published asks for one.
const minRefreshGap = 100 * time.Millisecond

// headRows is how many of the oldest unpublished rows a refresh keeps.
const headRows = 64

// recentRows is how many published seqs Metrics remembers, to drop from a
// refresh the rows Kafka acknowledged that were not marked yet when its
// statement ran (the relay marks a delivered chunk up to --claim-window
// later).
const recentRows = 4096

// headRow is one of the oldest rows of a refresh: its seq and created_at
// (Unix seconds, database clock).
type headRow struct {
	seq     int64
	created float64
}

// oldestView holds what Published changes in the oldest snapshot.
type oldestView struct {
	mu     sync.Mutex
	recent [recentRows]int64 // ring of published seqs
	next   int               // next slot of recent
	// poke asks the refresher for a refresh now (capacity 1, never
	// blocks).
	poke chan struct{}
}

// without returns a copy of o without the rows whose seqs published holds
// (published(seq) reports them), or nil when none of them is in o. It asks
// for a refresh (ask true) when o's head was not the whole backlog and
// either every row of the head or the claimable row is gone.
func (o *oldestSnapshot) without(published func(seq int64) bool) (n *oldestSnapshot, ask bool) {
	keep := o.head[:0:0]
	for _, r := range o.head {
		if !published(r.seq) {
			keep = append(keep, r)
		}
	}
	claimableGone := o.claimableSeq != 0 && published(o.claimableSeq)
	if len(keep) == len(o.head) && !claimableGone {
		return nil, false
	}
	c := *o
	c.head = keep
	c.setAges()
	if claimableGone {
		c.claimableSeq, c.claimable = 0, 0
	}
	return &c, !c.complete && (len(keep) == 0 || claimableGone)
}

// setAges sets o.unpublished from its head: the first row's created_at;
// with an empty head, 0 when the refresh saw every row, else the last
// row's it saw (lastSeen).
func (o *oldestSnapshot) setAges() {
	switch {
	case len(o.head) > 0:
		o.unpublished = o.head[0].created
	case o.complete:
		o.unpublished = 0
	default:
		o.unpublished = o.lastSeen
	}
}

// sortedHas reports whether seq is in seqs, sorted.
func sortedHas(seqs []int64, seq int64) bool {
	_, ok := slices.BinarySearch(seqs, seq)
	return ok
}

// notePublished drops the rows Kafka acknowledged from the oldest snapshot
// and remembers their seqs (Published's part for the age gauges).
func (m *Metrics) notePublished(rows []claim.Row) {
	v := &m.oview
	v.mu.Lock()
	defer v.mu.Unlock()
	for i := range rows {
		v.recent[v.next] = rows[i].Seq
		v.next = (v.next + 1) % recentRows
	}
	o := m.oldest.Load()
	if o == nil || len(o.head) == 0 && o.claimableSeq == 0 {
		return
	}
	var seqs []int64
	for i := range rows {
		s := rows[i].Seq
		if s == o.claimableSeq || len(o.head) > 0 && s >= o.head[0].seq && s <= o.head[len(o.head)-1].seq {
			seqs = append(seqs, s)
		}
	}
	if len(seqs) == 0 {
		return
	}
	slices.Sort(seqs)
	n, ask := o.without(func(seq int64) bool { return sortedHas(seqs, seq) })
	if n == nil {
		return
	}
	m.oldest.Store(n)
	if ask {
		m.askRefresh()
	}
}

// storeOldest stores a refresh's snapshot, without the rows published
// since (they may not have been marked when its statement ran).
func (m *Metrics) storeOldest(o *oldestSnapshot) {
	v := &m.oview
	v.mu.Lock()
	defer v.mu.Unlock()
	o.setAges()
	recent := slices.Clone(v.recent[:])
	slices.Sort(recent)
	if n, ask := o.without(func(seq int64) bool { return seq != 0 && sortedHas(recent, seq) }); n != nil {
		o = n
		if ask {
			m.askRefresh()
		}
	}
	m.oldest.Store(o)
}

// askRefresh asks the refresher for a refresh now.
func (m *Metrics) askRefresh() {
	select {
	case m.oview.poke <- struct{}{}:
	default:
	}
}
