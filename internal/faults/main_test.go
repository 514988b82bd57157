package faults

import (
	"testing"

	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	sweepStaleBinDirs()
	testenv.Main(m)
}
