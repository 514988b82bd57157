// Package format configures what the relay writes into each Kafka record:
// the value as the event's JSON payload (the default), or encoded in a
// schema of a Confluent-compatible Schema Registry and framed in the
// Confluent wire format (Avro, Protobuf, JSON Schema), and, optionally,
// the CloudEvents binary-mode headers. relay.ServiceConfig.Format holds
// it; outbox-relay run sets it from --value-format and the
// --schema-registry-* flags.
package format

import (
	"net/url"
	"strings"
	"time"

	"github.com/pgoutbox/outbox/internal/config"
)

// Value is Config.Value: how a record's value is written.
type Value string

// The value formats. Every format but ValueJSON needs Config.RegistryURL.
const (
	// ValueJSON writes the payload as stored (jsonb as PostgreSQL prints
	// it); no registry is involved. The default.
	ValueJSON Value = "json"
	// ValueAvro encodes the JSON payload in the subject's Avro schema
	// (Avro binary) behind the Confluent framing.
	ValueAvro Value = "avro"
	// ValueProtobuf encodes the JSON payload (protobuf's JSON mapping) as
	// the subject's Protobuf message, behind the Confluent framing and the
	// message indexes.
	ValueProtobuf Value = "protobuf"
	// ValueJSONSchema validates the JSON payload against the subject's JSON
	// Schema and writes it, as JSON, behind the Confluent framing.
	ValueJSONSchema Value = "json-schema"
)

// SubjectStrategy is Config.SubjectStrategy: how an event's subject (the
// registry's name for a schema's versions) is named.
type SubjectStrategy string

// The subject name strategies, named as Confluent's serializers name them.
const (
	// SubjectTopic: "<topic>-value" (TopicNameStrategy). The default.
	SubjectTopic SubjectStrategy = "topic"
	// SubjectRecord: "<record>", the record name taken from the event
	// (Config.RecordHeader) (RecordNameStrategy).
	SubjectRecord SubjectStrategy = "record"
	// SubjectTopicRecord: "<topic>-<record>" (TopicRecordNameStrategy).
	SubjectTopicRecord SubjectStrategy = "topic-record"
)

// Defaults applied by WithDefaults to zero-valued Config fields.
const (
	// DefaultValue is the value format: the payload as stored.
	DefaultValue = ValueJSON
	// DefaultSubjectStrategy names subjects "<topic>-value".
	DefaultSubjectStrategy = SubjectTopic
	// DefaultRecordHeader is the header whose value names an event's
	// record for SubjectRecord and SubjectTopicRecord: the event type,
	// which the relay always sets.
	DefaultRecordHeader = "event_type"
	// DefaultSchemaRefresh is how often a subject's latest version is
	// asked for again, in the background, while its cached schema goes on
	// encoding: a version registered meanwhile is used within this.
	DefaultSchemaRefresh = 30 * time.Second
	// MinSchemaRefresh is the shortest Config.SchemaRefresh.
	MinSchemaRefresh = time.Second
	// DefaultRegistryTimeout bounds one request to the registry.
	DefaultRegistryTimeout = 5 * time.Second
	// DefaultCloudEventsSource is ce_source unless configured.
	DefaultCloudEventsSource = "pgoutbox"
)

// Config configures the records' format. The zero value writes the
// payload as JSON, as the relay always did. Fields are plain types so that
// they map one-to-one to command-line flags.
type Config struct {
	// Value is the value format. Defaults to ValueJSON.
	Value Value

	// RegistryURL is the Schema Registry's base URL (Confluent's REST API:
	// Confluent, Karapace, Apicurio's /apis/ccompat/v7, Redpanda).
	// Required by every Value but ValueJSON; "" otherwise.
	RegistryURL string
	// RegistryUsername and RegistryPassword are HTTP basic-auth
	// credentials. Default to "" (none).
	RegistryUsername string
	RegistryPassword string
	// RegistryCAFile is a PEM file of CAs to verify an https registry
	// with. Defaults to "" (system roots).
	RegistryCAFile string
	// RegistryCertFile and RegistryKeyFile are a PEM client certificate
	// and its key, for mutual TLS. Default to "" (none); set both or
	// neither.
	RegistryCertFile string
	RegistryKeyFile  string
	// RegistryTimeout bounds one request to the registry. Defaults to
	// DefaultRegistryTimeout.
	RegistryTimeout time.Duration

	// SubjectStrategy names the subject of an event's schema. Defaults to
	// SubjectTopic.
	SubjectStrategy SubjectStrategy
	// RecordHeader is the header (one the relay sets, or one of the row's
	// own headers) whose value is the record name of SubjectRecord and
	// SubjectTopicRecord. Defaults to DefaultRecordHeader. An event
	// without it cannot be encoded: it is dead-lettered, named.
	RecordHeader string
	// SchemaVersion pins the version of every subject used. Defaults to 0:
	// the latest, checked again every SchemaRefresh.
	SchemaVersion int
	// SchemaRefresh is how often the latest version of a subject in use is
	// asked for again, at least MinSchemaRefresh. Defaults to
	// DefaultSchemaRefresh; unused with SchemaVersion.
	SchemaRefresh time.Duration

	// CloudEvents adds the CloudEvents binary-mode headers to every
	// record: ce_specversion, ce_id (the event ID), ce_type (the event
	// type), ce_source, ce_time (created_at), ce_subject (the aggregate
	// ID), content-type and, with a registry format, ce_dataschema.
	// Defaults to false.
	CloudEvents bool
	// CloudEventsSource is ce_source. Defaults to DefaultCloudEventsSource.
	CloudEventsSource string
}

func fieldErr(field, format string, args ...any) error {
	return config.Invalid("format", field, format, args...)
}

// Registry reports whether the value format needs the Schema Registry.
func (c Config) Registry() bool {
	return c.Value != "" && c.Value != ValueJSON
}

// Validate returns a *outbox.FieldError ("format: Config.<Field>:
// <reason>") naming the first invalid field; c is not changed. The zero
// value is valid.
func (c Config) Validate() error {
	switch c.Value {
	case "", ValueJSON, ValueAvro, ValueProtobuf, ValueJSONSchema:
	default:
		return fieldErr("Value", "%q: want json, avro, protobuf or json-schema", c.Value)
	}
	switch c.SubjectStrategy {
	case "", SubjectTopic, SubjectRecord, SubjectTopicRecord:
	default:
		return fieldErr("SubjectStrategy", "%q: want topic, record or topic-record", c.SubjectStrategy)
	}
	if !c.Registry() {
		if c.RegistryURL != "" {
			return fieldErr("RegistryURL", "set, but Config.Value %q uses no registry: set avro, protobuf or json-schema", c.valueOrDefault())
		}
	} else if err := c.validateRegistry(); err != nil {
		return err
	}
	switch {
	case c.RegistryTimeout < 0:
		return fieldErr("RegistryTimeout", "negative")
	case c.SchemaVersion < 0:
		return fieldErr("SchemaVersion", "negative: 0 is the latest")
	case c.SchemaRefresh != 0 && c.SchemaRefresh < MinSchemaRefresh:
		return fieldErr("SchemaRefresh", "%s is under the least, %s: every relay would ask the registry for every subject that often", c.SchemaRefresh, MinSchemaRefresh)
	case strings.TrimSpace(c.RecordHeader) != c.RecordHeader:
		return fieldErr("RecordHeader", "%q has surrounding spaces", c.RecordHeader)
	}
	return nil
}

func (c Config) validateRegistry() error {
	if c.RegistryURL == "" {
		return fieldErr("RegistryURL", "empty: Config.Value %q needs a Schema Registry", c.Value)
	}
	u, err := url.Parse(c.RegistryURL)
	if err != nil {
		return fieldErr("RegistryURL", "%v", err)
	}
	if (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fieldErr("RegistryURL", "%q: want http://host:port or https://host:port", c.RegistryURL)
	}
	if u.User != nil {
		return fieldErr("RegistryURL", "has credentials in it: set Config.RegistryUsername and RegistryPassword")
	}
	if u.Scheme != "https" && (c.RegistryCAFile != "" || c.RegistryCertFile != "") {
		return fieldErr("RegistryCAFile", "TLS files set for %q, which is not https", c.RegistryURL)
	}
	if (c.RegistryCertFile == "") != (c.RegistryKeyFile == "") {
		return fieldErr("RegistryCertFile", "set RegistryCertFile and RegistryKeyFile together")
	}
	if (c.RegistryUsername == "") != (c.RegistryPassword == "") {
		return fieldErr("RegistryUsername", "set RegistryUsername and RegistryPassword together")
	}
	return nil
}

func (c Config) valueOrDefault() Value {
	if c.Value == "" {
		return DefaultValue
	}
	return c.Value
}

// WithDefaults returns c with every zero-valued field that has a default
// set to it.
func (c Config) WithDefaults() Config {
	c.Value = c.valueOrDefault()
	if c.SubjectStrategy == "" {
		c.SubjectStrategy = DefaultSubjectStrategy
	}
	if c.RecordHeader == "" {
		c.RecordHeader = DefaultRecordHeader
	}
	if c.SchemaRefresh == 0 {
		c.SchemaRefresh = DefaultSchemaRefresh
	}
	if c.RegistryTimeout == 0 {
		c.RegistryTimeout = DefaultRegistryTimeout
	}
	if c.CloudEventsSource == "" {
		c.CloudEventsSource = DefaultCloudEventsSource
	}
	return c
}
