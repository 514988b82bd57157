package lease

import (
	"crypto/rand"
	"encoding/hex"
	"os"
	"slices"
)

// DefaultRelayID returns "<hostname>-<8 hex digits>", unique per process.
func DefaultRelayID() string {
	host, err := os.Hostname()
	if err != nil || host == "" {
		host = "relay"
	}
	var b [4]byte
	_, _ = rand.Read(b[:])
	return host + "-" + hex.EncodeToString(b[:])
}

// randomHex returns 2n random hex digits.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func sortRows(rows []Row) {
	slices.SortFunc(rows, func(a, b Row) int {
		switch {
		case a.Seq < b.Seq:
			return -1
		case a.Seq > b.Seq:
			return 1
		}
		return 0
	})
}
