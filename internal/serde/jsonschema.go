package serde

import (
	"bytes"
	"fmt"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"golang.org/x/text/language"
	"golang.org/x/text/message"
)

// jsonSchemaCodec validates an event's JSON payload against a JSON Schema
// (santhosh-tekuri/jsonschema, every draft) and writes it unchanged behind
// the framing, as Confluent's JSON Schema serializer does.
type jsonSchemaCodec struct {
	schema *jsonschema.Schema
}

// schemaURL is the name the compiled schema goes by; references are added
// under their own names (the registry's reference names).
const schemaURL = "urn:pgoutbox:schema"

// newJSONSchemaCodec compiles text with refs (reference name to schema
// text). Nothing is loaded from the network or the disk: a $ref must name
// one of refs.
func newJSONSchemaCodec(text string, refs map[string]string) (*jsonSchemaCodec, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	add := func(url, text string) error {
		doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
		if err != nil {
			return fmt.Errorf("%s: %w", url, err)
		}
		return c.AddResource(url, doc)
	}
	for name, ref := range refs {
		if err := add(name, ref); err != nil {
			return nil, err
		}
	}
	if err := add(schemaURL, text); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return &jsonSchemaCodec{schema: s}, nil
}

var english = message.NewPrinter(language.English)

func (c *jsonSchemaCodec) encode(dst, payload []byte, _ string) ([]byte, error) {
	inst, err := jsonschema.UnmarshalJSON(bytes.NewReader(payload))
	if err != nil {
		return nil, fmt.Errorf("payload is not JSON: %w", err)
	}
	if err := c.schema.Validate(inst); err != nil {
		if ve, ok := err.(*jsonschema.ValidationError); ok {
			leaf := firstLeaf(ve)
			return nil, &fieldError{path: strings.Join(leaf.InstanceLocation, "."), msg: leaf.ErrorKind.LocalizedString(english)}
		}
		return nil, err
	}
	return append(dst, payload...), nil
}

// firstLeaf returns the first innermost cause of e: the one that names a
// field.
func firstLeaf(e *jsonschema.ValidationError) *jsonschema.ValidationError {
	for len(e.Causes) > 0 {
		e = e.Causes[0]
	}
	return e
}
