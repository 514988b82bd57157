package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"regexp"
	"slices"
	"strings"
	"sync"
)

// envFlagNames is the set of environment variables some command's flag
// reads, taken from the commands' own usage texts ("[env OUTBOX_...]"),
// so that it cannot drift from the flags. Built once.
var envFlagNames = sync.OnceValue(func() []string {
	re := regexp.MustCompile(`\[env (OUTBOX_[A-Z0-9_]+)\]`)
	var names []string
	for _, run := range commands {
		var usage bytes.Buffer
		_ = run(context.Background(), []string{"--help"}, &usage, io.Discard)
		for _, m := range re.FindAllStringSubmatch(usage.String(), -1) {
			names = append(names, m[1])
		}
	}
	slices.Sort(names)
	return slices.Compact(names)
})

// misspelledEnv returns a warning for each OUTBOX_* variable of environ
// ("NAME=value" strings) that no flag reads but that is within two edits
// (one for a short name), or differs only in underscores, of one that does: a misspelling, which
// would otherwise be ignored without a word, unlike an unknown flag. A
// variable far from every flag's is left alone: the other tools of the
// project and applications may have OUTBOX_* settings of their own.
func misspelledEnv(environ []string) []string {
	known := envFlagNames()
	var warnings []string
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if !strings.HasPrefix(name, "OUTBOX_") || slices.Contains(known, name) {
			continue
		}
		// Two edits apart on a name of 8 bytes or more, one on a shorter
		// one: OUTBOX_RATE (another tool's) is two from OUTBOX_ROLE.
		best, bestDist := "", 2
		if len(name)-len("OUTBOX_") >= 8 {
			bestDist = 3
		}
		for _, k := range known {
			d := editDistance(name[len("OUTBOX_"):], k[len("OUTBOX_"):])
			if strings.ReplaceAll(name, "_", "") == strings.ReplaceAll(k, "_", "") {
				d = 0
			}
			if d < bestDist {
				best, bestDist = k, d
			}
		}
		if best != "" {
			warnings = append(warnings, fmt.Sprintf("outbox-relay: warning: %s is read by no flag and is ignored; did you mean %s?", name, best))
		}
	}
	slices.Sort(warnings)
	return warnings
}

// editDistance is the Levenshtein distance of a and b, in bytes.
func editDistance(a, b string) int {
	prev := make([]int, len(b)+1)
	cur := make([]int, len(b)+1)
	for j := range prev {
		prev[j] = j
	}
	for i := 1; i <= len(a); i++ {
		cur[0] = i
		for j := 1; j <= len(b); j++ {
			cost := 1
			if a[i-1] == b[j-1] {
				cost = 0
			}
			cur[j] = min(prev[j]+1, cur[j-1]+1, prev[j-1]+cost)
		}
		prev, cur = cur, prev
	}
	return prev[len(b)]
}
