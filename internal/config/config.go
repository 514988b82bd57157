// Package config holds what every component's configuration shares: the
// typed error its Validate returns, so that callers (the outbox-relay
// command, applications) can name the bad field without parsing error text.
// The type is public as outbox.FieldError.
package config

import (
	"crypto/rand"
	"encoding/hex"
	"fmt"
)

// FieldError says which field of which component's Config is invalid, and
// why.
type FieldError struct {
	// Component is the package that owns the Config: "relay", "lease",
	// "kafka", "notify", "metrics", "retention", "outbox".
	Component string
	// Field is the Config field's name, e.g. "Lease".
	Field string
	// Type is the configuration type's name; "" means "Config".
	Type string
	// Reason says what is wrong, e.g. "must be at least 1s, got 500ms".
	// It may name other fields as "Config.Other".
	Reason string
}

// Error returns "<component>: Config.<Field>: <reason>" (with Type instead
// of Config when set).
func (e *FieldError) Error() string {
	typ := e.Type
	if typ == "" {
		typ = "Config"
	}
	return e.Component + ": " + typ + "." + e.Field + ": " + e.Reason
}

// Invalid returns a *FieldError with the reason formatted from format and
// args.
func Invalid(component, field, format string, args ...any) error {
	return &FieldError{Component: component, Field: field, Reason: fmt.Sprintf(format, args...)}
}

// DefaultTable is the outbox table's name unless configured: the
// writer's, the relay's and the migrations' default, exported as
// outbox.DefaultTable.
const DefaultTable = "outbox"

// DefaultChannel is the NOTIFY channel the writers signal and the relay
// LISTENs on unless configured, exported as outbox.DefaultChannel.
const DefaultChannel = "outbox"

// KeyPartitionsPrefix starts a notification payload that names the key
// partitions of the events it announces, as decimal numbers separated by
// commas ("kp:3,17"): only the relays that own one of them wake up. Any
// other payload ("" included) wakes every relay listening on the channel.
const KeyPartitionsPrefix = "kp:"

// MembersPayload is the payload of the notification that every change of
// a table's members or owners sends: every relay wakes and rebalances,
// and none takes it for a writer's notification, since no event stands
// behind it. A relay of an older version wakes for it as for any payload.
const MembersPayload = "members"

// PollWakePrefix starts the payload of a notification that a relay's
// fallback poll sends to wake the owners of the claimable events it found
// in their key partitions ("poll:kp:3,17"): it wakes only them, as
// KeyPartitionsPrefix does, and the relays count the wake-up as a poll's,
// not a writer's (the warning about writers that do not notify). A relay
// of an older version takes it for an untargeted payload and wakes.
const PollWakePrefix = "poll:"

// MaxKeyPartitionsNamed is the most key partitions a writer names in one
// notification; a transaction with events in more sends an empty payload
// (every relay wakes), which keeps the payload far below PostgreSQL's
// 8,000-byte limit.
const MaxKeyPartitionsNamed = 64

// RandomHex returns 2n random hex digits: the suffixes that make relay and
// claimer IDs unique per process.
func RandomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
