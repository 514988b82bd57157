// Package ownership is the pure logic of key-partition ownership (see
// lease, owner.go): which live relay each partition is assigned to
// (Assign), and what one relay's rebalance does (PlanRebalance). The
// Claimer uses it, and so do the relay's model test and the fault suites,
// which check the same assignment from outside.
package ownership

import (
	"cmp"
	"hash/fnv"
	"slices"
	"strconv"
)

// Assign returns which member owns each of partitions key partitions
// (the index is the partition): every member gets partitions/len(members)
// of them, the first partitions%len(members) members by rank one more, so
// no two members' shares differ by more than one. It is a pure function
// of the member names and the count, so every relay computes the same
// assignment from the same list of live relays, whatever its order.
//
// It is rendezvous hashing with bounded load: each partition ranks the
// members by a hash of (member, partition) and goes to the best-ranked one
// that still has room. A member joining or leaving moves about a
// 1/len(members) share of the partitions, not all of them, so most
// partitions keep their owner through a rebalance. nil members gives nil.
func Assign(members []string, partitions int) []string {
	if len(members) == 0 || partitions < 1 {
		return nil
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	base, extra := partitions/len(ms), partitions%len(ms)
	// Which members get the extra partition: the first `extra` by a hash
	// of their name, so that it does not always fall on the same ones.
	capacity := make(map[string]int, len(ms))
	byRank := slices.Clone(ms)
	slices.SortFunc(byRank, func(a, b string) int { return cmp.Compare(rank(a, -1), rank(b, -1)) })
	for i, m := range byRank {
		capacity[m] = base
		if i < extra {
			capacity[m]++
		}
	}
	// Partitions are placed in a fixed pseudo-random order (not 0, 1, 2,
	// ...), so that the members that fill up first are not always those
	// that rank high on the low partitions.
	order := make([]int, partitions)
	for p := range order {
		order[p] = p
	}
	keys := make([]uint64, partitions)
	for p := range keys {
		keys[p] = rank("", p)
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(keys[a], keys[b]) })
	out := make([]string, partitions)
	type pref struct {
		w uint64
		m string
	}
	prefs := make([]pref, len(ms))
	for _, p := range order {
		for i, m := range ms {
			prefs[i] = pref{rank(m, p), m}
		}
		slices.SortFunc(prefs, func(a, b pref) int { return cmp.Compare(b.w, a.w) })
		for _, c := range prefs {
			if capacity[c.m] > 0 {
				capacity[c.m]--
				out[p] = c.m
				break
			}
		}
	}
	return out
}

// rank is the rendezvous weight of member for partition p.
func rank(member string, p int) uint64 {
	h := fnv.New64a()
	_, _ = h.Write([]byte(member))
	_, _ = h.Write([]byte{0})
	_, _ = h.Write([]byte(strconv.Itoa(p)))
	// FNV's low bits mix poorly for short inputs: finish like splitmix64.
	x := h.Sum64()
	x ^= x >> 30
	x *= 0xbf58476d1ce4e5b9
	x ^= x >> 27
	x *= 0x94d049bb133111eb
	x ^= x >> 31
	return x
}
