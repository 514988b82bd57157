package bench

import (
	"context"
	"fmt"

	"github.com/twmb/franz-go/pkg/sr"
	"github.com/twmb/franz-go/pkg/sr/srfake"
)

// The schemas of the benchmark's payload (payload: {"pad": "x..."}) in
// each registry value format, registered under the subject of its event
// type, benchEventType (subject name strategy "record").
var payloadSchemas = map[string]struct {
	typ  sr.SchemaType
	text string
}{
	"avro":        {sr.TypeAvro, `{"type": "record", "name": "BenchEvent", "namespace": "pgoutbox.bench", "fields": [{"name": "pad", "type": "string"}]}`},
	"json-schema": {sr.TypeJSON, `{"type": "object", "properties": {"pad": {"type": "string"}}, "required": ["pad"], "additionalProperties": false}`},
	"protobuf":    {sr.TypeProtobuf, `syntax = "proto3"; package pgoutbox.bench; message BenchEvent { string pad = 1; }`},
}

// benchEventType is the event type of every benchmark event.
const benchEventType = "bench.event"

// Registry is a Schema Registry for the benchmark's relays: franz-go's
// srfake, in-process, serving Confluent's REST API over HTTP.
type Registry struct {
	fake *srfake.Registry
}

// StartRegistry starts a registry with the payload's schema of value
// format (avro, json-schema or protobuf) registered. Close it when done.
func StartRegistry(ctx context.Context, format string) (*Registry, error) {
	s, ok := payloadSchemas[format]
	if !ok {
		return nil, fmt.Errorf("bench: value format %q: want avro, json-schema or protobuf", format)
	}
	fake := srfake.New()
	cl, err := sr.NewClient(sr.URLs(fake.URL()))
	if err == nil {
		_, err = cl.CreateSchema(ctx, benchEventType, sr.Schema{Schema: s.text, Type: s.typ})
	}
	if err != nil {
		fake.Close()
		return nil, fmt.Errorf("bench: registry: %w", err)
	}
	return &Registry{fake: fake}, nil
}

// RelayArgs are the `outbox-relay run` flags that make a relay encode
// values in format with this registry (Env.RelayArgsB).
func (r *Registry) RelayArgs(format string) []string {
	return []string{"--value-format", format, "--schema-registry-url", r.fake.URL(), "--subject-name-strategy", "record"}
}

// Close stops the registry.
func (r *Registry) Close() { r.fake.Close() }
