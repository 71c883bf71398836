package registry

import (
	"encoding/json"
	"fmt"
	"math"
	"strings"

	"github.com/bettercompute/computed/internal/pattern"
)

// Type is a field's JSON type.
type Type string

const (
	String  Type = "string"
	Integer Type = "integer"
	Boolean Type = "boolean"
	Object  Type = "object"
	Array   Type = "array"
	Any     Type = "any"
)

// Field describes one input field and its constraints. The same description
// validates requests and is rendered into the index, OpenAPI and docs.
type Field struct {
	Name        string
	Type        Type
	Required    bool
	Description string
	Pattern     string
	MaxLength   int
	Min, Max    *int64
	Enum        []string
	Default     any
	Fields      []Field // Object: known properties; nil with Open means free-form
	Open        bool    // Object: accept any properties (checked by the domain)
	Schema      string  // Open object: the defined schema (DefineSchema) describing it, for the documents
	MaxBytes    int     // Open object: the most bytes of JSON the domain takes, for the documents
	Items       *Field  // Array
	MaxItems    int
	MinItems    int

	re *pattern.Regexp // Pattern with ECMA-262 semantics, as the index publishes it
}

// Int returns a pointer, for Min and Max.
func Int(v int64) *int64 { return &v }

// Integer fields land in int4 columns unless they say otherwise: the
// bounds of every integer field come from here, so no value the database
// cannot hold reaches a statement.
const (
	MinInt4 = math.MinInt32
	MaxInt4 = math.MaxInt32
)

func (f *Field) compile() {
	if f.Pattern != "" && f.re == nil {
		f.re = pattern.MustCompile(f.Pattern)
	}
	if f.Type == Integer {
		if f.Min == nil {
			f.Min = Int(MinInt4)
		}
		if f.Max == nil {
			f.Max = Int(MaxInt4)
		}
	}
	for i := range f.Fields {
		f.Fields[i].compile()
	}
	if f.Items != nil {
		f.Items.compile()
	}
}

// Constraints renders the constraint column of the docs table.
func (f Field) Constraints() string {
	var parts []string
	if len(f.Enum) > 0 {
		q := make([]string, len(f.Enum))
		copy(q, f.Enum)
		parts = append(parts, "one of "+strings.Join(q, ", "))
	}
	if f.MaxLength > 0 {
		parts = append(parts, fmt.Sprintf("at most %d characters", f.MaxLength))
	}
	if f.Pattern != "" {
		// The line separators, which a pattern holds as themselves, shown
		// as ECMA-262 escapes (in a page they read as spaces).
		parts = append(parts, "matches `"+strings.NewReplacer("\u2028", `\u2028`, "\u2029", `\u2029`).Replace(f.Pattern)+"`")
	}
	switch {
	case f.Min != nil && f.Max != nil:
		parts = append(parts, fmt.Sprintf("%d-%d", *f.Min, *f.Max))
	case f.Min != nil:
		parts = append(parts, fmt.Sprintf("at least %d", *f.Min))
	case f.Max != nil:
		parts = append(parts, fmt.Sprintf("at most %d", *f.Max))
	}
	if f.MaxItems > 0 {
		parts = append(parts, fmt.Sprintf("at most %d items", f.MaxItems))
	}
	if f.MaxBytes > 0 {
		parts = append(parts, fmt.Sprintf("at most %d bytes of JSON", f.MaxBytes))
	}
	// A list of scalars has no rows of its own: its items' rules go here
	// (a MAC's pattern, an event type's length showed nowhere).
	if f.Items != nil && len(f.Items.Fields) == 0 {
		if c := f.Items.Constraints(); c != "" {
			parts = append(parts, "each item: "+c)
		}
	}
	if f.Default != nil {
		b, _ := json.Marshal(f.Default)
		parts = append(parts, "default "+string(b))
	}
	return strings.Join(parts, "; ")
}

// JSONSchema renders the field as a JSON Schema (2020-12) object.
func (f Field) JSONSchema() map[string]any {
	if f.Schema != "" {
		s := map[string]any{"$ref": RefPrefix + f.Schema}
		if f.Description != "" {
			s["description"] = f.Description
		}
		if f.Default != nil {
			s["default"] = f.Default
		}
		return s
	}
	s := map[string]any{}
	if f.Type != Any {
		s["type"] = string(f.Type)
	}
	if f.Description != "" {
		s["description"] = f.Description
	}
	if f.Pattern != "" {
		s["pattern"] = f.Pattern
	}
	if f.MaxLength > 0 {
		s["maxLength"] = f.MaxLength
	}
	if f.Min != nil {
		s["minimum"] = *f.Min
	}
	if f.Max != nil {
		s["maximum"] = *f.Max
	}
	if len(f.Enum) > 0 {
		s["enum"] = f.Enum
	}
	if f.Default != nil {
		s["default"] = f.Default
	}
	if f.Type == Array {
		if f.Items != nil {
			s["items"] = f.Items.JSONSchema()
		}
		if f.MaxItems > 0 {
			s["maxItems"] = f.MaxItems
		}
		if f.MinItems > 0 {
			s["minItems"] = f.MinItems
		}
	}
	if f.Type == Object && !f.Open {
		s["properties"], s["required"] = objectSchema(f.Fields)
		s["additionalProperties"] = false
	}
	if f.Type == Object && f.Open {
		// Say so: an object schema without additionalProperties is read
		// as an empty record by client generators (openapi-typescript
		// makes it Record<string, never>).
		s["additionalProperties"] = true
	}
	return s
}

func objectSchema(fields []Field) (map[string]any, []string) {
	props := map[string]any{}
	req := []string{}
	for _, c := range fields {
		props[c.Name] = c.JSONSchema()
		if c.Required {
			req = append(req, c.Name)
		} else if c.Type != Any || c.Schema != "" {
			// The decoder takes an optional field's null for the field
			// left out (its default applies; complete): the schema says
			// so, or a client validating against it, or typed by it,
			// is told null is refused while the server takes it.
			props[c.Name] = orNull(props[c.Name].(map[string]any))
		}
	}
	return props, req
}

func rangeText(f *Field) string {
	switch {
	case f.Min != nil && f.Max != nil:
		return fmt.Sprintf("%d-%d", *f.Min, *f.Max)
	case f.Min != nil:
		return fmt.Sprintf("at least %d", *f.Min)
	default:
		return fmt.Sprintf("at most %d", *f.Max)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}
