package produce

import "github.com/pgoutbox/outbox/kafka"

// MessageSize returns the size of m as kafka-go accounts it against
// Config.BatchBytes (key, value and headers plus a fixed per-record overhead
// of the legacy message format). It approximates, and slightly
// overestimates, the bytes the record adds to a produce request.
func MessageSize(m *kafka.Message) int64 {
	// Mirrors kafka-go v0.4.51 Message.totalSize: size() + headerSize().
	n := int64(4+1+1+8) + int64(4+len(m.Key)) + int64(4+len(m.Value))
	n += int64(varIntLen(int64(len(m.Headers))))
	for i := range m.Headers {
		h := &m.Headers[i]
		n += int64(varIntLen(int64(len(h.Key))) + len(h.Key))
		n += int64(varIntLen(int64(len(h.Value))) + len(h.Value))
	}
	return n
}

func varIntLen(i int64) int {
	u := uint64((i << 1) ^ (i >> 63)) // zig-zag
	n := 1
	for u >= 0x80 {
		u >>= 7
		n++
	}
	return n
}
