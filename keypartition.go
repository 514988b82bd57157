package outbox

import (
	"crypto/sha256"
	"encoding/binary"
)

// KeyPartition returns the key partition, in [0, partitions), of an
// aggregate ID: the first four bytes of the SHA-256 of its UTF-8 bytes,
// read as a big-endian unsigned integer, modulo partitions. The outbox
// table's insert trigger writes this number into the row's key_partition
// column (migration 00009; in SQL, the function outbox_key_partition), the
// same on every PostgreSQL version and platform. Relays share a table by
// owning key partitions: all events of one aggregate are in one partition,
// so they are only ever claimed by the one relay that owns it. It panics
// if partitions < 1.
func KeyPartition(aggregateID string, partitions int) int {
	if partitions < 1 {
		panic("outbox: KeyPartition: partitions < 1")
	}
	sum := sha256.Sum256([]byte(aggregateID))
	return int(binary.BigEndian.Uint32(sum[:4]) % uint32(partitions))
}
