package faults

import (
	"testing"

	"github.com/pgoutbox/outbox/internal/faultkit"
	"github.com/pgoutbox/outbox/internal/testenv"
)

func TestMain(m *testing.M) {
	faultkit.SweepStaleBinDirs()
	testenv.Main(m)
}
