package sql

import "time"

// Defaults and bounds of the time partitions of a table migrated with
// MigrateOptions.TimePartitioned.
const (
	// DefaultTimePartitionInterval is MigrateOptions.TimePartitionInterval's
	// default: one partition a day.
	DefaultTimePartitionInterval = 24 * time.Hour
	// MinTimePartitionInterval bounds MigrateOptions.TimePartitionInterval
	// from below: shorter partitions make a plan of every claim cover too
	// many of them.
	MinTimePartitionInterval = time.Hour
	// DefaultTimePartitionsAhead is MigrateOptions.TimePartitionsAhead's
	// default: the partitions of the coming 7 intervals exist at any time,
	// so a relay (which creates them) can be down for that long before an
	// event lands in the DEFAULT partition.
	DefaultTimePartitionsAhead = 7
	// MaxTimePartitionsAhead bounds MigrateOptions.TimePartitionsAhead.
	MaxTimePartitionsAhead = 366
)
