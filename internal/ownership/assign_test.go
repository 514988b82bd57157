package ownership

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
