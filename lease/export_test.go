package lease

// DisableResume makes every claim of c scan from the floor, as if no claim
// were ever full (BenchmarkDrainScan's comparison).
func DisableResume(c *Claimer) { c.noResume = true }
