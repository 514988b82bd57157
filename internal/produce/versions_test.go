package produce

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/pgoutbox/outbox/kafka"

	"github.com/segmentio/kafka-go/protocol"
	"github.com/twmb/franz-go/pkg/kgo"
	"github.com/twmb/franz-go/pkg/kmsg"

	"github.com/pgoutbox/outbox/internal/testenv"
)

// brokerRange is one API's version range from the broker's ApiVersions
// response.
type brokerRange struct{ min, max int16 }

// brokerVersions asks the broker for its ApiVersions with franz-go (an
// independent client) and returns the range of every API key it lists.
func brokerVersions(t *testing.T, brokers []string) map[int16]brokerRange {
	t.Helper()
	cl, err := kgo.NewClient(kgo.SeedBrokers(brokers...))
	if err != nil {
		t.Fatal(err)
	}
	defer cl.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	resp, err := kmsg.NewPtrApiVersionsRequest().RequestWith(ctx, cl)
	if err != nil {
		t.Fatalf("ApiVersions: %v", err)
	}
	out := make(map[int16]brokerRange, len(resp.ApiKeys))
	for _, k := range resp.ApiKeys {
		out[k.ApiKey] = brokerRange{k.MinVersion, k.MaxVersion}
	}
	return out
}

// kip896Floor is the lowest version of an API that Kafka 4.x accepts where
// it differs from the minimum its ApiVersions response advertises: 4.x
// advertises Produce v0-v2 but closes the connection on them (KIP-896
// removed them; KAFKA-18659 kept them in ApiVersions for librdkafka).
var kip896Floor = map[int16]int16{int16(protocol.Produce): 3}

// majorVersion returns the major version of a Kafka version string
// ("4.4.0": 4), or 0 for kfake and unknown strings.
func majorVersion(v string) int {
	n, err := strconv.Atoi(strings.SplitN(v, ".", 2)[0])
	if err != nil {
		return 0
	}
	return n
}

// TestRequestVersionsAreSupportedByTheBroker: every request the
// Publisher's paths send to the test's broker uses a version that broker
// accepts. What it proves, and what not:
//
//   - The produce path (kafka-go's Writer and Transport: Produce, Metadata,
//     and SaslHandshake and SaslAuthenticate on SASL listeners) picks each
//     version with kafka-go's own protocol.ApiKey.SelectVersion from the
//     broker's ApiVersions answer: min(kafka-go's max, broker's max),
//     never checked against the broker's minimum. The test runs that same
//     function on the broker's answer (read with franz-go) and asserts the
//     result lies in the broker's range, and on Kafka 4.x at or above the
//     KIP-896 floor (Produce v3).
//   - The bootstrap connections of Ping, CheckTopics, the error describer
//     and the Writer go through a recording proxy: every request header
//     seen (API key and version: ApiVersions v0, Metadata v1, v8) must
//     be in the broker's range. Produce requests go to the broker's
//     advertised address, not through the proxy; the first bullet and a
//     successful Publish cover them.
//   - The SASL versions are checked by the first bullet only (the shared
//     test broker has no SASL listener); docs/compatibility.md lists those
//     seen on a SASL listener of Kafka 4.4.0.
//
// It does not prove anything about brokers the tests do not run against.
func TestRequestVersionsAreSupportedByTheBroker(t *testing.T) {
	k := testenv.Kafka(t)
	topic := k.Topic(t, 3)
	supported := brokerVersions(t, k.Brokers)
	check := func(what string, key, v int16) {
		t.Helper()
		r, ok := supported[key]
		name := protocol.ApiKey(key).String()
		switch {
		case !ok:
			t.Errorf("%s: %s (key %d) v%d: the broker (%s) does not list the API", what, name, key, v, k.Version)
		case v < r.min || v > r.max:
			t.Errorf("%s: %s (key %d) v%d: outside the broker's range v%d-v%d (%s)", what, name, key, v, r.min, r.max, k.Version)
		case majorVersion(k.Version) >= 4 && v < kip896Floor[key]:
			t.Errorf("%s: %s (key %d) v%d: below v%d, the lowest Kafka 4.x accepts (KIP-896)", what, name, key, v, kip896Floor[key])
		default:
			t.Logf("%s: %s (key %d) v%d, broker v%d-v%d", what, name, key, v, r.min, r.max)
		}
	}

	for _, key := range []protocol.ApiKey{protocol.Produce, protocol.Metadata, protocol.SaslHandshake, protocol.SaslAuthenticate} {
		r, ok := supported[int16(key)]
		if !ok {
			t.Errorf("the broker (%s) does not list %s", k.Version, key)
			continue
		}
		check("Writer (kafka-go SelectVersion)", int16(key), key.SelectVersion(r.min, r.max))
	}

	rec := startRecordingProxy(t, k.Brokers[0])
	p := newTestPublisher(t, kafka.Config{Brokers: []string{rec.addr}, Topic: topic, ClientID: "versions-test"})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := p.Ping(ctx); err != nil {
		t.Fatalf("Ping: %v", err)
	}
	if err := p.CheckTopics(ctx); err != nil {
		t.Fatalf("CheckTopics: %v", err)
	}
	if err := p.Send(ctx, []kafka.Message{{Key: []byte("a"), Value: []byte("1")}, {Key: []byte("b"), Value: []byte("2")}}); err != nil {
		t.Fatalf("Publish: %v", err)
	}
	// The metadata request that explains a failed publish (the
	// describer's), made here without a failure.
	if _, err := p.describe.topic(ctx, topic); err != nil {
		t.Fatalf("describe: %v", err)
	}
	seen := rec.requests()
	for _, want := range []protocol.ApiKey{protocol.ApiVersions, protocol.Metadata} {
		found := false
		for r := range seen {
			found = found || r.key == int16(want)
		}
		if !found {
			t.Errorf("the proxy saw no %s request: %v", want, seen)
		}
	}
	for r, n := range seen {
		if r.client != "versions-test" {
			t.Errorf("request %v with client ID %q", r, r.client)
		}
		check(fmt.Sprintf("bootstrap connection (%d requests)", n), r.key, r.version)
	}
}

// request is one request header seen by the recording proxy.
type request struct {
	key, version int16
	client       string
}

// recordingProxy forwards TCP connections to a broker and records the
// header (API key, version, client ID) of every request sent to it.
type recordingProxy struct {
	addr string
	mu   sync.Mutex
	seen map[request]int
}

func startRecordingProxy(t *testing.T, broker string) *recordingProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	r := &recordingProxy{addr: ln.Addr().String(), seen: map[request]int{}}
	var wg sync.WaitGroup
	var conns sync.Map
	t.Cleanup(func() {
		ln.Close()
		conns.Range(func(c, _ any) bool { c.(net.Conn).Close(); return true })
		wg.Wait()
	})
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s, err := net.Dial("tcp", broker)
			if err != nil {
				c.Close()
				continue
			}
			conns.Store(c, nil)
			conns.Store(s, nil)
			wg.Add(2)
			go func() {
				defer wg.Done()
				_, _ = io.Copy(c, s)
				c.Close()
			}()
			go func() {
				defer wg.Done()
				defer s.Close()
				if err := r.forward(c, s); err != nil && !errors.Is(err, io.EOF) && !errors.Is(err, net.ErrClosed) {
					t.Logf("recording proxy: %v", err)
				}
			}()
		}
	}()
	return r
}

// forward copies requests from client to broker, one size-prefixed frame
// at a time, recording each header: int16 API key, int16 version, int32
// correlation ID, nullable string client ID.
func (r *recordingProxy) forward(client, broker net.Conn) error {
	var size [4]byte
	for {
		if _, err := io.ReadFull(client, size[:]); err != nil {
			return err
		}
		frame := make([]byte, binary.BigEndian.Uint32(size[:]))
		if _, err := io.ReadFull(client, frame); err != nil {
			return err
		}
		if len(frame) < 10 {
			return fmt.Errorf("a %d-byte request", len(frame))
		}
		req := request{key: int16(binary.BigEndian.Uint16(frame)), version: int16(binary.BigEndian.Uint16(frame[2:]))}
		if n := int(int16(binary.BigEndian.Uint16(frame[8:]))); n > 0 && 10+n <= len(frame) {
			req.client = string(frame[10 : 10+n])
		}
		r.mu.Lock()
		r.seen[req]++
		r.mu.Unlock()
		if _, err := broker.Write(append(size[:], frame...)); err != nil {
			return err
		}
	}
}

// requests returns a copy of what was recorded: each header and how many
// requests had it.
func (r *recordingProxy) requests() map[request]int {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := make(map[request]int, len(r.seen))
	for k, v := range r.seen {
		out[k] = v
	}
	return out
}
