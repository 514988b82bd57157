package claim

import (
	"slices"
	"testing"

	"github.com/pgoutbox/outbox/internal/ownership"
)

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
	want := ownership.Assign(members, parts)
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
