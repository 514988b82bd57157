package relay

import (
	"errors"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/internal/config"
)

// Config.Validate names the bad field; WithDefaults fills the busy claim
// interval. No database.
func TestConfigValidateNamesTheField(t *testing.T) {
	if got := (Config{}).WithDefaults().BusyClaimInterval; got != 20*time.Millisecond {
		t.Errorf("BusyClaimInterval default %s, want 20ms", got)
	}
	for _, c := range []struct {
		cfg   Config
		field string
	}{
		{Config{BusyClaimInterval: -time.Millisecond}, "BusyClaimInterval"},
		{Config{ClaimWindowPoll: -time.Millisecond}, "ClaimWindowPoll"},
		{Config{PollInterval: time.Microsecond}, "PollInterval"},
		{Config{MaxAttempts: -1}, "MaxAttempts"},
	} {
		var fe *config.FieldError
		if err := c.cfg.Validate(); !errors.As(err, &fe) || fe.Field != c.field {
			t.Errorf("%+v: Validate() = %v, want an error naming %s", c.cfg, err, c.field)
		}
	}
	if err := (Config{BusyClaimInterval: 5 * time.Millisecond}).Validate(); err != nil {
		t.Errorf("BusyClaimInterval 5ms: %v", err)
	}
}
