package claim

import "time"

// DisableResume makes every claim of c scan from the floor, as if no claim
// were ever full (BenchmarkDrainScan's comparison).
func DisableResume(c *Claimer) { c.fl.noResume = true }

// LastAdvance is when c last moved its floor: tests count floor advances
// with it instead of waiting for a time to pass.
func LastAdvance(c *Claimer) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.fl.lastAdvance
}
