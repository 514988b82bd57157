package ownership

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
