package serde

import (
	"bytes"
	"fmt"
	"net/url"
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

// schemaURL is the URL the compiled schema goes by: a reference with a
// relative name ("address.json") resolves against it, as against the
// schema's own $id.
const schemaURL = "https://schema-registry.invalid/subjects/schema.json"

// newJSONSchemaCodec compiles text with refs (reference name to schema
// text). Each reference is added under its name resolved against
// schemaURL and against the schema's $id, so that a $ref finds it however
// its name is written. Nothing is loaded from the network or the disk: a
// $ref must name one of refs.
func newJSONSchemaCodec(text string, refs map[string]string) (*jsonSchemaCodec, error) {
	c := jsonschema.NewCompiler()
	c.UseLoader(jsonschema.SchemeURLLoader{})
	root, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		return nil, err
	}
	bases := []*url.URL{mustParse(schemaURL)}
	if m, ok := root.(map[string]any); ok {
		if id, ok := m["$id"].(string); ok {
			if u, err := url.Parse(id); err == nil && u.IsAbs() {
				bases = append(bases, u)
			}
		}
	}
	for name, ref := range refs {
		rel, err := url.Parse(name)
		if err != nil {
			return nil, fmt.Errorf("reference %q: %w", name, err)
		}
		added := map[string]bool{}
		for _, b := range bases {
			u := b.ResolveReference(rel).String()
			if added[u] {
				continue
			}
			added[u] = true
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(ref))
			if err != nil {
				return nil, fmt.Errorf("reference %q: %w", name, err)
			}
			if err := c.AddResource(u, doc); err != nil {
				return nil, fmt.Errorf("reference %q: %w", name, err)
			}
		}
	}
	if err := c.AddResource(schemaURL, root); err != nil {
		return nil, err
	}
	s, err := c.Compile(schemaURL)
	if err != nil {
		return nil, err
	}
	return &jsonSchemaCodec{schema: s}, nil
}

func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		panic(err)
	}
	return u
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
