package lease

import (
	"fmt"
	"slices"
	"testing"
)

func members(n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("relay-%d/%08x", i, i*2654435761)
	}
	return out
}

func shares(a []string) map[string]int {
	s := map[string]int{}
	for _, m := range a {
		s[m]++
	}
	return s
}

// Every member gets its share within one partition, and the assignment
// does not depend on the order the members are listed in.
func TestAssignIsBalancedAndDeterministic(t *testing.T) {
	for _, n := range []int{1, 2, 3, 4, 7, 16, 255, 256, 300} {
		for _, parts := range []int{1, 2, 16, 256, 4096} {
			ms := members(n)
			a := Assign(ms, parts)
			if len(a) != parts {
				t.Fatalf("%d members, %d partitions: %d assigned", n, parts, len(a))
			}
			lo, hi := parts, 0
			s := shares(a)
			for _, m := range ms {
				lo, hi = min(lo, s[m]), max(hi, s[m])
			}
			if hi-lo > 1 || hi > (parts+n-1)/n {
				t.Errorf("%d members, %d partitions: shares from %d to %d", n, parts, lo, hi)
			}
			rev := slices.Clone(ms)
			slices.Reverse(rev)
			if !slices.Equal(Assign(rev, parts), a) {
				t.Errorf("%d members, %d partitions: the order of the members changed the assignment", n, parts)
			}
		}
	}
	if Assign(nil, 256) != nil {
		t.Error("no members: want no assignment")
	}
}

// A member joining or leaving moves few partitions: at most twice the
// newcomer's share (rendezvous hashing with bounded load moves a share
// plus what the bounds push around), not most of them as p mod n would.
func TestAssignMovesFewPartitions(t *testing.T) {
	const parts = 256
	for n := 1; n <= 8; n++ {
		before := Assign(members(n), parts)
		after := Assign(members(n+1), parts)
		moved := 0
		for p := range before {
			if before[p] != after[p] {
				moved++
			}
		}
		share := parts / (n + 1)
		if moved > 2*share+1 {
			t.Errorf("%d -> %d members: %d of %d partitions moved, want at most about %d", n, n+1, moved, parts, 2*share)
		}
		t.Logf("%d -> %d members: %d partitions moved (share %d)", n, n+1, moved, share)
	}
}

func TestOwnersSettled(t *testing.T) {
	const parts = 16
	members := []string{"a", "b", "c"}
	owners := func(assign []string, live ...string) *Owners {
		o := &Owners{Partitions: parts}
		for _, m := range members {
			mo := MemberOwnership{Member: m, Live: slices.Contains(live, m)}
			for p, who := range assign {
				if who == m {
					mo.Owned = append(mo.Owned, p)
				}
			}
			o.Relays = append(o.Relays, mo)
		}
		return o
	}
	want := Assign(members, parts)
	if !owners(want, members...).Settled() {
		t.Fatal("the assignment of the live members is not settled")
	}
	if owners(want, "a", "b").Settled() {
		t.Fatal("settled although c, no longer live, still owns partitions")
	}
	moved := slices.Clone(want)
	moved[0], moved[1] = "a", "a"
	if moved[0] == want[0] && moved[1] == want[1] {
		moved[0], moved[1] = "b", "b"
	}
	if owners(moved, members...).Settled() {
		t.Fatal("settled with partitions away from their assigned owner")
	}
	free := slices.Clone(want)
	free[3] = ""
	if owners(free, members...).Settled() {
		t.Fatal("settled with a free partition")
	}
	if (&Owners{Partitions: parts}).Settled() {
		t.Fatal("settled with no live member")
	}
}
