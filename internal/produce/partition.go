package produce

// Partition returns the partition, in [0, numPartitions), that the Java
// client's default partitioner picks for a record with a non-null key:
// toPositive(murmur2(key)) % numPartitions, where toPositive clears the sign
// bit (org.apache.kafka.clients.producer.internals.BuiltInPartitioner
// .partitionForKey and org.apache.kafka.common.utils.Utils.murmur2). This is
// the partition the Publisher's writer (kafka-go's
// Murmur2Balancer{Consistent: true}) sends a message with that key to. A nil
// key hashes like an empty one (the Java client would instead spread null-key
// records over partitions). It panics if numPartitions <= 0.
func Partition(key []byte, numPartitions int) int {
	if numPartitions <= 0 {
		panic("kafka: Partition: numPartitions <= 0")
	}
	return int((murmur2(key) & 0x7fffffff) % uint32(numPartitions))
}

// murmur2 is the 32-bit MurmurHash2 with Kafka's seed, a port of the Java
// client's Utils.murmur2 (the same function as kafka-go's and franz-go's).
func murmur2(data []byte) uint32 {
	const (
		seed uint32 = 0x9747b28c
		m    uint32 = 0x5bd1e995
		r           = 24
	)
	length := len(data)
	h := seed ^ uint32(length)
	for i := 0; i+4 <= length; i += 4 {
		k := uint32(data[i]) | uint32(data[i+1])<<8 | uint32(data[i+2])<<16 | uint32(data[i+3])<<24
		k *= m
		k ^= k >> r
		k *= m
		h *= m
		h ^= k
	}
	tail := length &^ 3
	switch length & 3 {
	case 3:
		h ^= uint32(data[tail+2]) << 16
		fallthrough
	case 2:
		h ^= uint32(data[tail+1]) << 8
		fallthrough
	case 1:
		h ^= uint32(data[tail])
		h *= m
	}
	h ^= h >> 13
	h *= m
	h ^= h >> 15
	return h
}
