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

// KillPresence ends c's presence session as a process's death would: the
// lock is freed by the server and the declaration stays behind.
func KillPresence(c *Claimer) {
	c.pres.declared.Store(false) // no Undeclare on the way out
	c.pres.stop()
}

// PresenceDeclared reports whether c's last beat declared its presence.
func PresenceDeclared(c *Claimer) bool { return c.pres != nil && c.pres.declared.Load() }
