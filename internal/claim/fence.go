package claim

import (
	"context"
	"time"
)

// Fencer ends the writes to Kafka of a member whose key partitions this
// relay takes over; *produce.Publisher implements it (kafka.Config.Fence).
type Fencer interface {
	// FenceMember makes the brokers refuse every later write of member.
	FenceMember(ctx context.Context, member string) error
	// Clean reports whether nothing this relay sent can still be written:
	// until it is, the relay gives no key partition to another.
	Clean() bool
}

// SetFencer makes every rebalance fence the former owner of each key
// partition it acquires from a member whose membership ended, before it
// takes the partition, and give back no partition while f is not clean.
// Call it before the first claim; nil (the default) fences nothing.
func (c *Claimer) SetFencer(f Fencer) { c.fencer = f }

// fence fences the former owners of the partitions of acquire (owners:
// the owner of each partition, "" for nobody) and returns those this
// relay may take: a partition whose former owner could not be fenced (the
// transaction coordinator unreachable) waits for the next rebalance, a
// second later (refenceDelay) at most.
func (c *Claimer) fence(ctx context.Context, acquire []int, owners []string, now time.Time) []int {
	c.own.refenceAt = time.Time{}
	tried := map[string]error{}
	kept := acquire[:0]
	for _, p := range acquire {
		who := owners[p]
		if who != "" && who != c.own.member {
			err, ok := tried[who]
			if !ok {
				err = c.fencer.FenceMember(ctx, who)
				tried[who] = err
			}
			if err != nil {
				c.own.fenceFailures++
				c.own.refenceAt = now.Add(min(refenceDelay, c.cfg.Lease/renewEvery))
				continue
			}
		}
		kept = append(kept, p)
	}
	return kept
}

// refenceDelay is the longest wait before a rebalance tries again to
// fence a former owner it could not.
const refenceDelay = time.Second
