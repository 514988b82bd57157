package format_test

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/pgoutbox/outbox"
	"github.com/pgoutbox/outbox/kafka/format"
)

func TestValidateNamesTheField(t *testing.T) {
	reg := "http://registry:8081"
	for _, tc := range []struct {
		cfg   format.Config
		field string
		says  string
	}{
		{format.Config{Value: "xml"}, "Value", "want json, avro, protobuf or json-schema"},
		{format.Config{Value: format.ValueAvro}, "RegistryURL", "needs a Schema Registry"},
		{format.Config{RegistryURL: reg}, "RegistryURL", "uses no registry"},
		{format.Config{Value: format.ValueAvro, RegistryURL: "registry:8081"}, "RegistryURL", "want http://host:port"},
		{format.Config{Value: format.ValueAvro, RegistryURL: "http://u:p@registry:8081"}, "RegistryURL", "credentials in it"},
		{format.Config{Value: format.ValueAvro, RegistryURL: reg, RegistryCAFile: "ca.pem"}, "RegistryCAFile", "not https"},
		{format.Config{Value: format.ValueAvro, RegistryURL: "https://registry", RegistryCertFile: "c.pem"}, "RegistryCertFile", "together"},
		{format.Config{Value: format.ValueAvro, RegistryURL: reg, RegistryUsername: "u"}, "RegistryUsername", "together"},
		{format.Config{SubjectStrategy: "name"}, "SubjectStrategy", "want topic, record or topic-record"},
		{format.Config{Value: format.ValueAvro, RegistryURL: reg, SchemaVersion: -1}, "SchemaVersion", "negative"},
		{format.Config{RecordHeader: " type"}, "RecordHeader", "surrounding spaces"},
		{format.Config{SchemaRefresh: time.Millisecond}, "SchemaRefresh", "under the least, 1s"},
	} {
		err := tc.cfg.Validate()
		var fe *outbox.FieldError
		if !errors.As(err, &fe) || fe.Component != "format" || fe.Field != tc.field || !strings.Contains(fe.Reason, tc.says) {
			t.Errorf("%+v: got %v, want format Config.%s saying %q", tc.cfg, err, tc.field, tc.says)
		}
	}
	for _, ok := range []format.Config{
		{},
		{Value: format.ValueJSON, CloudEvents: true},
		{Value: format.ValueProtobuf, RegistryURL: "https://registry:8081", RegistryCAFile: "ca.pem", RegistryUsername: "u", RegistryPassword: "p"},
		{Value: format.ValueJSONSchema, RegistryURL: reg, SubjectStrategy: format.SubjectTopicRecord, SchemaVersion: 3},
	} {
		if err := ok.Validate(); err != nil {
			t.Errorf("%+v: %v", ok, err)
		}
	}
	d := format.Config{}.WithDefaults()
	if d.Value != format.ValueJSON || d.SubjectStrategy != format.SubjectTopic || d.RecordHeader != "event_type" ||
		d.SchemaRefresh != format.DefaultSchemaRefresh || d.RegistryTimeout != format.DefaultRegistryTimeout || d.CloudEventsSource != "pgoutbox" {
		t.Errorf("defaults: %+v", d)
	}
}
