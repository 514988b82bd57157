package testenv

import (
	"context"
	"encoding/base64"
	"encoding/binary"
	"os"
	"sync"
	"testing"

	"github.com/linkedin/goavro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// TestRegistry is a Confluent-compatible Schema Registry for one test.
type TestRegistry struct {
	// URL is the registry's base URL.
	URL string
	// Client talks to it (register schemas, read them by ID).
	Client *sr.Client
	// Fake is the in-process registry, nil for one named by
	// OUTBOX_TEST_SCHEMA_REGISTRY_URL.
	Fake *srfake.Registry

	mu     sync.Mutex
	codecs map[int]*goavro.Codec // DecodeAvro's, by schema ID
}

// Registry returns the Schema Registry for t:
//
//   - the registry at OUTBOX_TEST_SCHEMA_REGISTRY_URL (Confluent's,
//     Karapace, Apicurio's /apis/ccompat/v7, Redpanda's), shared by every
//     test: tests name their subjects after their own topics;
//   - else franz-go's srfake, an in-process registry serving Confluent's
//     REST API over HTTP, closed when the test ends. No real registry can
//     be installed from the package registries this project's CI reaches
//     (docs/development.md says what was tried).
func Registry(t testing.TB) *TestRegistry {
	t.Helper()
	if u := os.Getenv(EnvSchemaRegistryURL); u != "" {
		cl, err := sr.NewClient(sr.URLs(u))
		if err != nil {
			t.Fatal(err)
		}
		return &TestRegistry{URL: u, Client: cl}
	}
	return fakeRegistry(t, "", "")
}

// RegistryWithAuth returns an in-process registry (srfake) that answers
// only requests with HTTP basic auth user:password (401 without, 403 with
// other credentials); its Client sends them.
func RegistryWithAuth(t testing.TB, user, password string) *TestRegistry {
	t.Helper()
	return fakeRegistry(t, user, password)
}

func fakeRegistry(t testing.TB, user, password string) *TestRegistry {
	var opts []srfake.Option
	clOpts := []sr.ClientOpt{}
	if user != "" {
		opts = append(opts, srfake.WithAuth("Basic "+base64.StdEncoding.EncodeToString([]byte(user+":"+password))))
		clOpts = append(clOpts, sr.BasicAuth(user, password))
	}
	fake := srfake.New(opts...)
	t.Cleanup(fake.Close)
	cl, err := sr.NewClient(append(clOpts, sr.URLs(fake.URL()))...)
	if err != nil {
		t.Fatal(err)
	}
	return &TestRegistry{URL: fake.URL(), Client: cl, Fake: fake}
}

// Register registers schema text of type typ under subject and returns its
// ID and version.
func (r *TestRegistry) Register(t testing.TB, subject string, typ sr.SchemaType, text string) (id, version int) {
	t.Helper()
	ss, err := r.Client.CreateSchema(context.Background(), subject, sr.Schema{Schema: text, Type: typ})
	if err != nil {
		t.Fatalf("register %s: %v", subject, err)
	}
	return ss.ID, ss.Version
}

// DecodeAvro decodes a Confluent-framed Avro value as an independent
// consumer does: the schema ID from the header, the schema by that ID
// from the registry, the body with linkedin/goavro (no code in common
// with the relay's encoder). It returns the decoded value and the ID.
func (r *TestRegistry) DecodeAvro(t testing.TB, value []byte) (any, int) {
	t.Helper()
	if len(value) < 5 || value[0] != 0 {
		t.Fatalf("value %q is not in the Confluent wire format", value)
	}
	id := int(binary.BigEndian.Uint32(value[1:5]))
	r.mu.Lock()
	codec := r.codecs[id]
	r.mu.Unlock()
	if codec == nil {
		s, err := r.Client.SchemaByID(context.Background(), id)
		if err != nil {
			t.Fatalf("schema ID %d: %v", id, err)
		}
		if codec, err = goavro.NewCodec(s.Schema); err != nil {
			t.Fatalf("schema ID %d: %v", id, err)
		}
		r.mu.Lock()
		if r.codecs == nil {
			r.codecs = map[int]*goavro.Codec{}
		}
		r.codecs[id] = codec
		r.mu.Unlock()
	}
	native, rest, err := codec.NativeFromBinary(value[5:])
	if err != nil || len(rest) != 0 {
		t.Fatalf("decode with schema ID %d: %v (%d bytes left)", id, err, len(rest))
	}
	return native, id
}
