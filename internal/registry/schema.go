package registry

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"regexp"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bettercompute/computed/internal/errs"
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
	Items       *Field  // Array
	MaxItems    int
	MinItems    int

	re *regexp.Regexp
}

// Int returns a pointer, for Min and Max.
func Int(v int64) *int64 { return &v }

func (f *Field) compile() {
	if f.Pattern != "" && f.re == nil {
		f.re = regexp.MustCompile(f.Pattern)
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
		parts = append(parts, "matches `"+f.Pattern+"`")
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
	return s
}

func objectSchema(fields []Field) (map[string]any, []string) {
	props := map[string]any{}
	req := []string{}
	for _, c := range fields {
		props[c.Name] = c.JSONSchema()
		if c.Required {
			req = append(req, c.Name)
		}
	}
	return props, req
}

// maxDepth bounds the nesting of any request body.
const maxDepth = 32

// decodeObject parses a JSON object body strictly (numbers kept exact) in one
// token pass that builds the value: a duplicate object key anywhere is
// INVALID_INPUT naming the duplicated field (`document.steps[2].use`), where
// encoding/json would silently keep the last one.
func decodeObject(raw []byte) (map[string]any, error) {
	// encoding/json would silently turn invalid UTF-8 into U+FFFD, and a
	// hashed document (an inventory report) would then not be what was sent.
	if !utf8.Valid(raw) {
		return nil, errs.Invalid("", "the body is not valid UTF-8")
	}
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	d := tokenDecoder{dec: dec}
	v, err := d.value(0)
	if err != nil {
		return nil, err
	}
	if dec.More() {
		return nil, errs.Invalid("", "the body holds more than one JSON value")
	}
	if v == nil {
		return map[string]any{}, nil
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errs.Invalid("", "the body must be a JSON object")
	}
	return m, nil
}

// tokenDecoder builds a value from json.Decoder tokens. The path of the
// value being read is kept as segments and only rendered for an error.
type tokenDecoder struct {
	dec  *json.Decoder
	path []pathSeg
}

type pathSeg struct {
	key   string
	index int // -1 for a key
}

func (d *tokenDecoder) pathString() string {
	var b strings.Builder
	for _, s := range d.path {
		if s.index < 0 {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		} else {
			fmt.Fprintf(&b, "[%d]", s.index)
		}
	}
	return b.String()
}

// value reads one value at nesting level (the body is level 0).
func (d *tokenDecoder) value(level int) (any, error) {
	if level > maxDepth {
		return nil, errs.Invalid(d.pathString(), "the body nests deeper than %d levels", maxDepth)
	}
	tok, err := d.dec.Token()
	if err != nil {
		return nil, errs.Invalid("", "the body is not valid JSON: %s", jsonErr(err))
	}
	delim, ok := tok.(json.Delim)
	if !ok {
		return tok, nil // string, json.Number, bool or nil
	}
	switch delim {
	case '{':
		m := map[string]any{}
		for d.dec.More() {
			kt, err := d.dec.Token()
			if err != nil {
				return nil, errs.Invalid("", "the body is not valid JSON: %s", jsonErr(err))
			}
			k, ok := kt.(string)
			if !ok { // unreachable: the decoder only yields string keys
				return nil, errs.Invalid("", "the body is not valid JSON: malformed JSON")
			}
			d.path = append(d.path, pathSeg{key: k, index: -1})
			if _, dup := m[k]; dup {
				return nil, errs.Invalid(d.pathString(), "duplicate key %q", k)
			}
			v, err := d.value(level + 1)
			if err != nil {
				return nil, err
			}
			m[k] = v
			d.path = d.path[:len(d.path)-1]
		}
		if err := d.end(); err != nil {
			return nil, err
		}
		return m, nil
	case '[':
		a := []any{}
		for i := 0; d.dec.More(); i++ {
			d.path = append(d.path, pathSeg{index: i})
			v, err := d.value(level + 1)
			if err != nil {
				return nil, err
			}
			a = append(a, v)
			d.path = d.path[:len(d.path)-1]
		}
		if err := d.end(); err != nil {
			return nil, err
		}
		return a, nil
	}
	// A closing delimiter where a value belongs: the decoder reports those
	// as syntax errors itself, so this is unreachable.
	return nil, errs.Invalid("", "the body is not valid JSON: malformed JSON")
}

// end consumes the closing delimiter of an object or array.
func (d *tokenDecoder) end() error {
	if _, err := d.dec.Token(); err != nil {
		return errs.Invalid("", "the body is not valid JSON: %s", jsonErr(err))
	}
	return nil
}

func jsonErr(err error) string {
	var se *json.SyntaxError
	if ok := asSyntax(err, &se); ok {
		return fmt.Sprintf("syntax error at offset %d", se.Offset)
	}
	return "malformed JSON"
}

func asSyntax(err error, target **json.SyntaxError) bool {
	se, ok := err.(*json.SyntaxError)
	if ok {
		*target = se
	}
	return ok
}

// validateObject checks m against fields in declared order and fills in
// defaults. Unknown fields are reported first, in sorted order, so the first
// offending field is deterministic.
func validateObject(path string, fields []Field, m map[string]any) error {
	known := make(map[string]bool, len(fields))
	for _, f := range fields {
		known[f.Name] = true
	}
	var unknown []string
	for k := range m {
		if !known[k] {
			unknown = append(unknown, k)
		}
	}
	if len(unknown) > 0 {
		sort.Strings(unknown)
		return errs.Invalid(join(path, unknown[0]), "unknown field %q", unknown[0])
	}
	for i := range fields {
		f := &fields[i]
		v, present := m[f.Name]
		if !present || v == nil {
			if f.Required {
				return errs.Invalid(join(path, f.Name), "%s is required", f.Name)
			}
			if present {
				delete(m, f.Name) // explicit null means absent
			}
			if f.Default != nil {
				m[f.Name] = f.Default
			}
			continue
		}
		nv, err := validateValue(join(path, f.Name), f, v)
		if err != nil {
			return err
		}
		m[f.Name] = nv
	}
	return nil
}

func join(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

func validateValue(path string, f *Field, v any) (any, error) {
	switch f.Type {
	case Any:
		return v, nil
	case String:
		s, ok := v.(string)
		if !ok {
			return nil, errs.Invalid(path, "%s must be a string", path)
		}
		if strings.ContainsRune(s, 0) {
			return nil, errs.Invalid(path, "%s must not contain NUL characters", path)
		}
		if f.MaxLength > 0 && utf8.RuneCountInString(s) > f.MaxLength {
			return nil, errs.Invalid(path, "%s is longer than %d characters", path, f.MaxLength)
		}
		if len(f.Enum) > 0 && !contains(f.Enum, s) {
			return nil, errs.Invalid(path, "%s must be one of %s", path, strings.Join(f.Enum, ", "))
		}
		if f.re != nil && !f.re.MatchString(s) {
			return nil, errs.Invalid(path, "%s does not match %s", path, f.Pattern)
		}
		return s, nil
	case Integer:
		n, ok := v.(json.Number)
		if !ok {
			return nil, errs.Invalid(path, "%s must be an integer", path)
		}
		i, err := strconv.ParseInt(n.String(), 10, 64)
		if err != nil {
			fl, ferr := n.Float64()
			if ferr != nil || fl != math.Trunc(fl) || math.Abs(fl) > 1<<53 {
				return nil, errs.Invalid(path, "%s must be an integer", path)
			}
			i = int64(fl)
		}
		if f.Min != nil && i < *f.Min || f.Max != nil && i > *f.Max {
			return nil, errs.Invalid(path, "%s must be in %s", path, rangeText(f))
		}
		return json.Number(strconv.FormatInt(i, 10)), nil
	case Boolean:
		if _, ok := v.(bool); !ok {
			return nil, errs.Invalid(path, "%s must be a boolean", path)
		}
		return v, nil
	case Object:
		m, ok := v.(map[string]any)
		if !ok {
			return nil, errs.Invalid(path, "%s must be an object", path)
		}
		if f.Open {
			return m, nil
		}
		if err := validateObject(path, f.Fields, m); err != nil {
			return nil, err
		}
		return m, nil
	case Array:
		a, ok := v.([]any)
		if !ok {
			return nil, errs.Invalid(path, "%s must be an array", path)
		}
		if f.MaxItems > 0 && len(a) > f.MaxItems {
			return nil, errs.Invalid(path, "%s has more than %d items", path, f.MaxItems)
		}
		if len(a) < f.MinItems {
			return nil, errs.Invalid(path, "%s needs at least %d items", path, f.MinItems)
		}
		if f.Items != nil {
			for i, e := range a {
				nv, err := validateValue(fmt.Sprintf("%s[%d]", path, i), f.Items, e)
				if err != nil {
					return nil, err
				}
				a[i] = nv
			}
		}
		return a, nil
	}
	return v, nil
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
