package claim_test

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/testenv"
	"github.com/pgoutbox/outbox/lease"
)

// fencer records the members a Claimer fences (claim.Fencer), failing
// while fail is set, and reports clean as set.
type fencer struct {
	mu      sync.Mutex
	fenced  []string
	fail    bool
	unclean bool
}

func (f *fencer) FenceMember(_ context.Context, member string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fenced = append(f.fenced, member)
	if f.fail {
		return errors.New("coordinator unreachable")
	}
	return nil
}

func (f *fencer) Clean() bool {
	f.mu.Lock()
	defer f.mu.Unlock()
	return !f.unclean
}

func (f *fencer) set(fail, unclean bool) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.fail, f.unclean = fail, unclean
}

func (f *fencer) calls() []string {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.fenced)
}

// A relay that takes key partitions over from a member whose membership
// ran out fences that member once, before it owns them; while the fence
// fails it takes none of them and tries again at a later claim, a second
// later at most. A relay whose publisher is not clean (a write's outcome
// unknown) gives no partition to a member that joins until it is.
func TestRebalanceFencesTheFormerOwnerBeforeTakingItsPartitions(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	db := testenv.MigratedDB(t)
	a := newClaimer(t, db.Pool, lease.Config{RelayID: "a", BatchSize: 100, Lease: 10 * time.Minute})
	first, err := a.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	a.Settled(first.Token, time.Time{})
	if _, err := db.Pool.Exec(ctx, "UPDATE outbox_relays SET until = now() - interval '1 second' WHERE member = $1", a.Member()); err != nil {
		t.Fatal(err)
	}

	b := newClaimer(t, db.Pool, lease.Config{RelayID: "b", BatchSize: 100, Lease: 10 * time.Minute})
	f := &fencer{}
	f.set(true, false)
	b.SetFencer(f)
	bt, err := b.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Settled(bt.Token, time.Time{})
	o := b.Ownership()
	if o.Owned != 0 || o.FenceFailures == 0 {
		t.Fatalf("with the fence failing b owns %d partitions (%d fence failures), want none", o.Owned, o.FenceFailures)
	}
	if got := f.calls(); !slices.Equal(got, []string{a.Member()}) {
		t.Fatalf("fenced %v, want %s once", got, a.Member())
	}

	f.set(false, false)
	deadline := time.Now().Add(30 * time.Second)
	for b.Ownership().Owned < o.Partitions {
		if time.Now().After(deadline) {
			t.Fatalf("b owns %d of %d partitions 30s after the fence succeeds", b.Ownership().Owned, o.Partitions)
		}
		bt, err := b.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Settled(bt.Token, time.Time{})
		time.Sleep(50 * time.Millisecond)
	}
	if got := f.calls(); len(got) < 2 || got[len(got)-1] != a.Member() {
		t.Fatalf("fenced %v, want %s again before taking its partitions", got, a.Member())
	}

	// c joins; b's publisher has a write of unknown outcome: b keeps every
	// partition until it is clean.
	c := newClaimer(t, db.Pool, lease.Config{RelayID: "c", BatchSize: 100, Lease: 10 * time.Minute})
	ct, err := c.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	c.Settled(ct.Token, time.Time{})
	f.set(false, true)
	for range 3 {
		bt, err := b.Claim(ctx)
		if err != nil {
			t.Fatal(err)
		}
		b.Settled(bt.Token, time.Time{})
	}
	if o := b.Ownership(); o.Released != 0 || o.Releasing == 0 {
		t.Fatalf("b not clean: released %d, releasing %d; want 0 released, some releasing", o.Released, o.Releasing)
	}
	f.set(false, false)
	bt, err = b.Claim(ctx)
	if err != nil {
		t.Fatal(err)
	}
	b.Settled(bt.Token, time.Time{})
	if o := b.Ownership(); o.Released == 0 {
		t.Fatalf("b clean again released nothing (releasing %d)", o.Releasing)
	}
	for _, m := range f.calls() {
		if m != a.Member() {
			t.Errorf("fenced %s: only a member whose membership ran out is fenced", m)
		}
	}
}
