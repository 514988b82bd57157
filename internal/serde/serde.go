// Package serde encodes events' JSON payloads in the schemas of a
// Confluent-compatible Schema Registry and frames them in the Confluent
// wire format (magic byte 0, the schema ID as 4 bytes big-endian, and for
// Protobuf the message indexes): the engine behind kafka/format.Config.
// franz-go's sr talks to the registry; hamba/avro parses Avro schemas.
//
// Each subject's schema is fetched once and cached with its compiled
// codec; the latest version is asked for again in the background every
// Config.SchemaRefresh, while the cached one goes on encoding, so a
// registry that goes down stops nothing already cached.
package serde

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/hamba/avro/v2"
	"github.com/twmb/franz-go/pkg/sr"
	"go.uber.org/zap"

	"github.com/pgoutbox/outbox/kafka"
	"github.com/pgoutbox/outbox/kafka/format"
)

// The three ways an event can fail to encode; produce classifies them.
var (
	// ErrSchema: the event does not fit its schema (a field, a type, a
	// missing record name). Sending it again cannot succeed: a dead letter.
	ErrSchema = errors.New("event does not fit its schema")
	// ErrRegistry: the registry did not answer, or refused the request
	// (credentials, an error of its own). An outage: no attempt counted.
	ErrRegistry = errors.New("schema registry unavailable")
	// ErrNoSubject: the registry has no such subject or version, or its
	// schema is of another type than the value format. An outage of the
	// event's aggregate: its pipeline may register the schema soon.
	ErrNoSubject = errors.New("schema not registered")
)

// missRetry is how long a failed lookup is answered from the cache: a
// batch of events of a missing subject, or of any subject while the
// registry is down, asks the registry once, not once per event.
const missRetry = time.Second

// Encoder encodes records' values in their subjects' schemas. Safe for
// concurrent use.
type Encoder struct {
	cfg format.Config
	cl  *sr.Client
	log *zap.Logger

	mu       sync.Mutex
	subjects map[string]*entry
	// downSince is when the registry's current outage began (zero: up).
	downSince time.Time

	// requests to the registry, encodings served from the cache, events
	// that did not fit their schema (Stats).
	requests, hits, faults atomic.Int64
}

// Stats returns the requests sent to the registry, the encodings served
// from the cache and the events that did not fit their schema.
func (e *Encoder) Stats() (requests, hits, faults int64) {
	return e.requests.Load(), e.hits.Load(), e.faults.Load()
}

// entry is one subject's cached schema, or its last failed lookup.
type entry struct {
	schema     *Schema
	at         time.Time // when schema or err was read
	err        error     // the last lookup's error while schema is nil
	refreshing bool
}

// Schema is one subject's schema as the Encoder uses it.
type Schema struct {
	Subject string
	Version int
	ID      int
	codec   codec
	// header is the Confluent framing every value starts with: the magic
	// byte and the ID (a Protobuf codec adds the message indexes).
	header []byte
}

// codec encodes one JSON payload, appended to dst; record is the event's
// record name ("" unknown), which picks a Protobuf schema's message.
type codec interface {
	encode(dst, payload []byte, record string) ([]byte, error)
}

// New returns an Encoder for cfg (validated, defaults applied); nil when
// cfg's value format uses no registry. log is named "schema_registry".
func New(cfg format.Config, log *zap.Logger) (*Encoder, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg = cfg.WithDefaults()
	if !cfg.Registry() {
		return nil, nil
	}
	if log == nil {
		log = zap.NewNop()
	}
	hc, err := httpClient(cfg)
	if err != nil {
		return nil, err
	}
	opts := []sr.ClientOpt{sr.URLs(cfg.RegistryURL), sr.HTTPClient(hc), sr.UserAgent("pgoutbox")}
	if cfg.RegistryUsername != "" {
		opts = append(opts, sr.BasicAuth(cfg.RegistryUsername, cfg.RegistryPassword))
	}
	cl, err := sr.NewClient(opts...)
	if err != nil {
		return nil, fmt.Errorf("schema registry: %w", err)
	}
	return &Encoder{cfg: cfg, cl: cl, log: log.Named("schema_registry"), subjects: map[string]*entry{}}, nil
}

func httpClient(cfg format.Config) (*http.Client, error) {
	t := http.DefaultTransport.(*http.Transport).Clone()
	t.DialContext = (&net.Dialer{Timeout: cfg.RegistryTimeout}).DialContext
	if strings.HasPrefix(cfg.RegistryURL, "https:") {
		tc := &tls.Config{MinVersion: tls.VersionTLS12}
		if cfg.RegistryCAFile != "" {
			pem, err := os.ReadFile(cfg.RegistryCAFile)
			if err != nil {
				return nil, fmt.Errorf("format: Config.RegistryCAFile: %w", err)
			}
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("format: Config.RegistryCAFile: %s: no PEM certificates", cfg.RegistryCAFile)
			}
			tc.RootCAs = pool
		}
		if cfg.RegistryCertFile != "" {
			cert, err := tls.LoadX509KeyPair(cfg.RegistryCertFile, cfg.RegistryKeyFile)
			if err != nil {
				return nil, fmt.Errorf("format: Config.RegistryCertFile: %w", err)
			}
			tc.Certificates = []tls.Certificate{cert}
		}
		t.TLSClientConfig = tc
	}
	return &http.Client{Transport: t, Timeout: cfg.RegistryTimeout}, nil
}

// Ping asks the registry for its global configuration: an error says it
// is unreachable or refuses the credentials.
func (e *Encoder) Ping(ctx context.Context) error {
	if err := e.cl.Do(ctx, http.MethodGet, "/config", nil, nil); err != nil {
		return e.registryErr("GET /config", err)
	}
	return nil
}

// URL is the registry's base URL.
func (e *Encoder) URL() string { return e.cfg.RegistryURL }

// Encode replaces m.Value, the event's JSON payload, with its encoding in
// its subject's schema behind the Confluent framing, and with
// Config.CloudEvents adds ce_dataschema. An error wraps ErrSchema,
// ErrRegistry or ErrNoSubject (or is ctx's); m is then unchanged.
//
// An event that does not fit the cached schema is tried against the
// subject's latest version, read then, before it counts as a fault: it
// may have been written for a version registered since the cache was
// filled. Encode reads it every time; a Session reads it once per subject.
// A nil value (a tombstone) is left nil.
func (e *Encoder) Encode(ctx context.Context, m *kafka.Message) error {
	return e.encode(ctx, m, map[string]error{})
}

// Session returns an Encode for one publish call, whose messages were all
// claimed before it started: an event that does not fit makes it read the
// latest version of the subject once (a version registered after that
// read was registered after the call began, so after the event was
// written), however many of the call's events do not fit.
func (e *Encoder) Session() func(context.Context, *kafka.Message) error {
	checked := map[string]error{}
	return func(ctx context.Context, m *kafka.Message) error { return e.encode(ctx, m, checked) }
}

// encode is Encode; checked holds the subjects whose latest version was
// read in this session, with the error of that read.
func (e *Encoder) encode(ctx context.Context, m *kafka.Message, checked map[string]error) error {
	if m.Value == nil {
		// A tombstone (SQL NULL payload) stays a null value, as
		// Confluent's serializers leave it.
		return nil
	}
	subject, record, err := e.subject(m)
	if err != nil {
		e.faults.Add(1)
		return err
	}
	s, err := e.schema(ctx, subject)
	if err != nil {
		return err
	}
	out, err := s.encode(m.Value, record)
	if err != nil {
		cerr, done := checked[subject]
		if !done {
			var later *Schema
			later, cerr = e.newer(ctx, s)
			checked[subject] = cerr
			if later != nil {
				s = later
				out, err = s.encode(m.Value, record)
			}
		}
		if err != nil && cerr != nil {
			// The event may fit the version that could not be read: it
			// waits for the registry, as a miss does.
			return fmt.Errorf("does not fit version %d (schema ID %d) of subject %q, and its latest version could not be read to check: %w", s.Version, s.ID, subject, cerr)
		}
	}
	if err != nil {
		e.faults.Add(1)
		return fmt.Errorf("%w: %w (subject %q, version %d, schema ID %d)", ErrSchema, err, s.Subject, s.Version, s.ID)
	}
	m.Value = out
	if e.cfg.CloudEvents {
		m.Headers = append(m.Headers, kafka.Header{Key: "ce_dataschema", Value: []byte(e.SchemaURL(s.ID))})
	}
	return nil
}

// encode returns payload encoded in s, framed.
func (s *Schema) encode(payload []byte, record string) ([]byte, error) {
	return s.codec.encode(append(make([]byte, 0, len(s.header)+len(payload)+8), s.header...), payload, record)
}

// newer returns the latest version of s's subject when it is not s (nil
// when it is, and always with Config.SchemaVersion), and caches it; an
// error wraps ErrRegistry or ErrNoSubject.
func (e *Encoder) newer(ctx context.Context, s *Schema) (*Schema, error) {
	if e.cfg.SchemaVersion != 0 {
		return nil, nil
	}
	latest, err := e.fetch(ctx, s.Subject)
	if err != nil || latest.ID == s.ID {
		return nil, err
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if en := e.subjects[s.Subject]; en != nil && (en.schema == nil || en.schema.ID == s.ID) {
		e.log.Info("new schema version in use", zap.String("subject", s.Subject), zap.Int("version", latest.Version), zap.Int("schema_id", latest.ID), zap.Int("previous_version", s.Version))
		en.schema, en.at = latest, time.Now()
	}
	return latest, nil
}

// SchemaURL is where the registry serves schema id.
func (e *Encoder) SchemaURL(id int) string {
	return strings.TrimSuffix(e.cfg.RegistryURL, "/") + fmt.Sprintf("/schemas/ids/%d", id)
}

// subject names m's subject by Config.SubjectStrategy, and returns its
// record name (the value of Config.RecordHeader, "" if it has none).
func (e *Encoder) subject(m *kafka.Message) (subject, record string, err error) {
	for _, h := range m.Headers {
		if h.Key == e.cfg.RecordHeader {
			record = string(h.Value)
		}
	}
	switch {
	case e.cfg.SubjectStrategy == format.SubjectTopic:
		return m.Topic + "-value", record, nil
	case record == "":
		return "", "", fmt.Errorf("%w: no record name: header %q is missing or empty (subject strategy %s)", ErrSchema, e.cfg.RecordHeader, e.cfg.SubjectStrategy)
	case e.cfg.SubjectStrategy == format.SubjectRecord:
		return record, record, nil
	}
	return m.Topic + "-" + record, record, nil
}

// Describe says what Encode does with m, without changing it: the
// subject, the schema it is encoded in (nil if the subject has none) and
// Encode's error (nil: the payload fits). outbox-relay inspect shows it.
func (e *Encoder) Describe(ctx context.Context, m kafka.Message) (subject string, s *Schema, err error) {
	subject, _, err = e.subject(&m)
	if err != nil {
		return "", nil, err
	}
	if s, err = e.schema(ctx, subject); err != nil {
		return subject, nil, err
	}
	m.Headers = append([]kafka.Header(nil), m.Headers...)
	if err = e.Encode(ctx, &m); err != nil {
		if latest, lerr := e.schema(ctx, subject); lerr == nil {
			s = latest
		}
		return subject, s, err
	}
	latest, err := e.schema(ctx, subject)
	return subject, latest, err
}

// schema returns subject's schema from the cache, starting a background
// refresh when it is older than SchemaRefresh, or from the registry.
func (e *Encoder) schema(ctx context.Context, subject string) (*Schema, error) {
	now := time.Now()
	e.mu.Lock()
	en := e.subjects[subject]
	if en == nil {
		en = &entry{}
		e.subjects[subject] = en
	}
	if s := en.schema; s != nil {
		if e.cfg.SchemaVersion == 0 && !en.refreshing && now.Sub(en.at) >= e.cfg.SchemaRefresh {
			en.refreshing = true
			go e.refresh(subject, en)
		}
		e.mu.Unlock()
		e.hits.Add(1)
		return s, nil
	}
	if en.err != nil && now.Sub(en.at) < missRetry {
		err := en.err
		e.mu.Unlock()
		return nil, err
	}
	e.mu.Unlock()
	s, err := e.fetch(ctx, subject)
	e.mu.Lock()
	defer e.mu.Unlock()
	if err != nil {
		if ctx.Err() == nil {
			en.err, en.at = err, time.Now()
		}
		return nil, err
	}
	en.schema, en.err, en.at = s, nil, time.Now()
	return s, nil
}

// refresh reads subject's latest version again, in the background; the
// cached schema stays in use if it fails.
func (e *Encoder) refresh(subject string, en *entry) {
	ctx, cancel := context.WithTimeout(context.Background(), e.cfg.RegistryTimeout)
	defer cancel()
	s, err := e.fetch(ctx, subject)
	e.mu.Lock()
	defer e.mu.Unlock()
	en.refreshing, en.at = false, time.Now()
	if err != nil {
		e.log.Debug("refreshing a schema failed; the cached version stays in use", zap.String("subject", subject), zap.Error(err))
		return
	}
	if old := en.schema; old.ID != s.ID {
		e.log.Info("new schema version in use", zap.String("subject", subject), zap.Int("version", s.Version), zap.Int("schema_id", s.ID), zap.Int("previous_version", old.Version))
	}
	en.schema = s
}

// fetch reads subject's schema (Config.SchemaVersion, or the latest) and
// compiles it.
func (e *Encoder) fetch(ctx context.Context, subject string) (*Schema, error) {
	version := e.cfg.SchemaVersion
	if version == 0 {
		version = -1
	}
	e.requests.Add(1)
	ss, err := e.cl.SchemaByVersion(ctx, subject, version)
	if err != nil {
		return nil, e.lookupErr(subject, err)
	}
	e.up()
	c, err := e.compile(ctx, ss)
	if err != nil {
		return nil, err
	}
	header, err := (&sr.ConfluentHeader{}).AppendEncode(nil, ss.ID, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: subject %q: %w", ErrNoSubject, subject, err)
	}
	return &Schema{Subject: subject, Version: ss.Version, ID: ss.ID, codec: c, header: header}, nil
}

// compile builds the codec of ss, which must be of the configured format.
func (e *Encoder) compile(ctx context.Context, ss sr.SubjectSchema) (codec, error) {
	want := map[format.Value]sr.SchemaType{format.ValueAvro: sr.TypeAvro, format.ValueProtobuf: sr.TypeProtobuf, format.ValueJSONSchema: sr.TypeJSON}[e.cfg.Value]
	if ss.Type != want {
		return nil, fmt.Errorf("%w: subject %q version %d holds a %s schema, and the relay encodes %s (--value-format)", ErrNoSubject, ss.Subject, ss.Version, ss.Type, e.cfg.Value)
	}
	var c codec
	var err error
	if e.cfg.Value == format.ValueAvro {
		cache := &avro.SchemaCache{}
		if err := e.avroReferences(ctx, ss.References, cache, 0); err != nil {
			return nil, err
		}
		c, err = newAvroCodec(ss.Schema.Schema, cache)
	} else {
		refs := map[string]string{}
		if err := e.references(ctx, ss.References, refs, 0); err != nil {
			return nil, err
		}
		if e.cfg.Value == format.ValueProtobuf {
			c, err = newProtobufCodec(ss.Schema.Schema, refs)
		} else {
			c, err = newJSONSchemaCodec(ss.Schema.Schema, refs)
		}
	}
	if err != nil {
		return nil, fmt.Errorf("%w: subject %q version %d (schema ID %d) does not compile: %w", ErrNoSubject, ss.Subject, ss.Version, ss.ID, err)
	}
	return c, nil
}

// maxReferenceDepth bounds a chain of schema references.
const maxReferenceDepth = 16

// avroReferences parses the schemas refs name, theirs first, into cache.
func (e *Encoder) avroReferences(ctx context.Context, refs []sr.SchemaReference, cache *avro.SchemaCache, depth int) error {
	if depth > maxReferenceDepth {
		return fmt.Errorf("%w: schema references nest deeper than %d", ErrNoSubject, maxReferenceDepth)
	}
	for _, ref := range refs {
		e.requests.Add(1)
		rs, err := e.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return e.lookupErr(ref.Subject, err)
		}
		if err := e.avroReferences(ctx, rs.References, cache, depth+1); err != nil {
			return err
		}
		if _, err := avro.ParseWithCache(rs.Schema.Schema, "", cache); err != nil {
			return fmt.Errorf("%w: referenced subject %q version %d does not compile: %w", ErrNoSubject, ref.Subject, ref.Version, err)
		}
	}
	return nil
}

// references reads the schemas refs name, and theirs, into texts by
// reference name (a Protobuf import path, a JSON Schema $ref URL).
func (e *Encoder) references(ctx context.Context, refs []sr.SchemaReference, texts map[string]string, depth int) error {
	if depth > maxReferenceDepth {
		return fmt.Errorf("%w: schema references nest deeper than %d", ErrNoSubject, maxReferenceDepth)
	}
	for _, ref := range refs {
		if _, done := texts[ref.Name]; done {
			continue
		}
		e.requests.Add(1)
		rs, err := e.cl.SchemaByVersion(ctx, ref.Subject, ref.Version)
		if err != nil {
			return e.lookupErr(ref.Subject, err)
		}
		texts[ref.Name] = rs.Schema.Schema
		if err := e.references(ctx, rs.References, texts, depth+1); err != nil {
			return err
		}
	}
	return nil
}

// errVersionNotFound is the Confluent REST API's error code for a
// version a subject does not have (40401: no such subject).
const errVersionNotFound = 40402

// lookupErr classifies a failed lookup of subject: not found is
// ErrNoSubject, anything else the registry's outage.
func (e *Encoder) lookupErr(subject string, err error) error {
	var re *sr.ResponseError
	if errors.As(err, &re) && re.StatusCode == http.StatusNotFound {
		e.up()
		what := "subject"
		if e.cfg.SchemaVersion != 0 && re.ErrorCode == errVersionNotFound {
			what = fmt.Sprintf("version %d of subject", e.cfg.SchemaVersion)
		}
		return fmt.Errorf("%w: the registry has no %s %q: register its schema (%s)", ErrNoSubject, what, subject, re.Error())
	}
	return e.registryErr("subject "+subject, err)
}

// registryErr wraps err, a failed request about what, in ErrRegistry,
// and logs the start of an outage once.
func (e *Encoder) registryErr(what string, err error) error {
	if errors.Is(err, context.Canceled) {
		return err
	}
	msg := err.Error()
	var re *sr.ResponseError
	if errors.As(err, &re) {
		switch re.StatusCode {
		case http.StatusUnauthorized, http.StatusForbidden:
			msg = fmt.Sprintf("HTTP %d: the registry refused the credentials (--schema-registry-username, --schema-registry-password): %s", re.StatusCode, re.Error())
		default:
			msg = fmt.Sprintf("HTTP %d: %s", re.StatusCode, re.Error())
		}
	}
	err = fmt.Errorf("%w: %s: %s: %s", ErrRegistry, e.cfg.RegistryURL, what, msg)
	e.mu.Lock()
	first := e.downSince.IsZero()
	if first {
		e.downSince = time.Now()
	}
	e.mu.Unlock()
	if first {
		e.log.Error("schema registry unavailable: events whose schema is not cached wait", zap.Error(err))
	}
	return err
}

// up ends an outage, logging its end once.
func (e *Encoder) up() {
	e.mu.Lock()
	since := e.downSince
	e.downSince = time.Time{}
	e.mu.Unlock()
	if !since.IsZero() {
		e.log.Info("schema registry answers again", zap.String("url", e.cfg.RegistryURL), zap.Duration("down_for", time.Since(since).Round(time.Millisecond)))
	}
}
