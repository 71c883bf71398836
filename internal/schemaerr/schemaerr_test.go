package schemaerr

import (
	"errors"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"
)

// Each bound a schema states is refused in the method surface's words,
// with the bound as the schema writes it.
func TestLeafWords(t *testing.T) {
	c := jsonschema.NewCompiler()
	schema, err := jsonschema.UnmarshalJSON(strings.NewReader(`{"type": "object", "properties": {
		"min": {"type": "integer", "minimum": 1}, "max": {"type": "number", "maximum": 86400000},
		"gt": {"type": "number", "exclusiveMinimum": 0.5}, "lt": {"type": "number", "exclusiveMaximum": 2},
		"step": {"type": "number", "multipleOf": 0.25}, "short": {"type": "string", "minLength": 2},
		"long": {"type": "string", "maxLength": 3}, "few": {"type": "array", "minItems": 1},
		"many": {"type": "array", "maxItems": 2}, "empty": {"type": "object", "minProperties": 1},
		"full": {"type": "object", "maxProperties": 1}, "kind": {"type": ["string", "null"]}}}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.AddResource("s.json", schema); err != nil {
		t.Fatal(err)
	}
	s := c.MustCompile("s.json")
	for doc, want := range map[string]string{
		`{"min": 0}`:                   "must be at least 1",
		`{"min": 1.5}`:                 "must be an integer",
		`{"max": 4611686018427387904}`: "must be at most 86400000",
		`{"max": 1e400}`:               "must be at most 86400000",
		`{"gt": 0.5}`:                  "must be greater than 0.5",
		`{"lt": 2}`:                    "must be less than 2",
		`{"step": 0.3}`:                "must be a multiple of 0.25",
		`{"short": "a"}`:               "needs at least 2 characters",
		`{"long": "abcd"}`:             "is longer than 3 characters",
		`{"few": []}`:                  "needs at least 1 items",
		`{"many": [1, 2, 3]}`:          "has more than 2 items",
		`{"empty": {}}`:                "needs at least 1 fields",
		`{"full": {"a": 1, "b": 2}}`:   "has more than 1 fields",
		`{"kind": 1}`:                  "must be null or a string",
	} {
		v, err := jsonschema.UnmarshalJSON(strings.NewReader(doc))
		if err != nil {
			t.Fatal(err)
		}
		var verr *jsonschema.ValidationError
		if !errors.As(s.Validate(v), &verr) {
			t.Fatalf("%s: accepted", doc)
		}
		for len(verr.Causes) > 0 {
			verr = verr.Causes[0]
		}
		if got := Leaf(verr); got != want {
			t.Errorf("%s: %q, want %q", doc, got, want)
		}
	}
}
