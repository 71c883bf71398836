package registry

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

var openBody = &Field{Type: Object, Open: true}

func decodeAny(raw string) (*value, error) { return decodeAs([]byte(raw), openBody) }

func TestDecodeRejectsDuplicateKeys(t *testing.T) {
	for _, tc := range []struct{ raw, path string }{
		{`{"tenantId":"a","tenantId":"b"}`, "tenantId"},
		{`{"tenantId":"a","profileId":"p","tenant\u0049d":"b"}`, "tenantId"},
		{`{"document":{"id":"x","id":"y"}}`, "document.id"},
		{`{"document":{"steps":[{"use":"disk.wipe"},{"use":"os.install","with":{},"use":"x"}]}}`, "document.steps[1].use"},
		{`{"a":[[{"b":{"c":1,"c":2}}]]}`, "a[0][0].b.c"},
		{`{"a":{},"b":[],"a":null}`, "a"},
	} {
		_, err := decodeAny(tc.raw)
		e, ok := errs.As(err)
		if !ok || e.Code != errs.InvalidInput {
			t.Fatalf("%s: %v, want INVALID_INPUT", tc.raw, err)
		}
		if e.Details["path"] != tc.path || !strings.HasPrefix(e.Message, "duplicate key ") {
			t.Fatalf("%s: path %q message %q, want path %q", tc.raw, e.Details["path"], e.Message, tc.path)
		}
	}
}

func TestDecodeKeepsValuesAndBytes(t *testing.T) {
	// Same keys in different objects are not duplicates; numbers stay exact;
	// keys keep document order; every value keeps its bytes as sent.
	raw := ` {"b":{"id":1},"a":{"id":1.50, "x" : [ 1 ,2 ]},"c":[{"id":9007199254740993},{"id":"x\u0041"}],"d":[],"e":{}} `
	v, err := decodeAny(raw)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(v.keys, []string{"b", "a", "c", "d", "e"}) {
		t.Fatalf("keys %v", v.keys)
	}
	if got := string(v.get("a").raw); got != `{"id":1.50, "x" : [ 1 ,2 ]}` {
		t.Fatalf("raw of a: %s", got)
	}
	if n := v.get("c").vals[0].get("id").num; n != "9007199254740993" {
		t.Fatalf("number %s", n)
	}
	if s := v.get("c").vals[1].get("id").str; s != "xA" {
		t.Fatalf("escaped string %q", s)
	}
	// null is not an object: it was taken as {} (a helper's probe), where
	// [], 1 and "x" are refused, and the contract's body is a JSON object.
	for _, raw := range []string{`null`, ` null `, `[]`, `1`, `"x"`} {
		if _, err := decodeAny(raw); err == nil || !strings.Contains(err.Error(), "the body must be a JSON object") {
			t.Fatalf("%s: %v", raw, err)
		}
	}
	// The body is level 0: 32 nested arrays under a field reach level 32.
	ok32 := `{"a":` + strings.Repeat("[", 32) + strings.Repeat("]", 32) + `}`
	if _, err := decodeAny(ok32); err != nil {
		t.Fatalf("32 levels: %v", err)
	}
	for raw, msg := range map[string]string{
		``:                  "the body is not valid JSON",
		`{"a":`:             "the body is not valid JSON",
		`{"a":1,}`:          "the body is not valid JSON: syntax error at offset 8",
		`{} {}`:             "the body must be one JSON object with nothing after it",
		`{"tenantId":"A"}}`: "the body must be one JSON object with nothing after it",
		`{"tenantId":"A"}]`: "the body must be one JSON object with nothing after it",
		`{"tenantId":"A"}x`: "the body must be one JSON object with nothing after it",
		`[{"a":1}]`:         "the body must be a JSON object",
		`"x"`:               "the body must be a JSON object",
		"{\"a\":\"\xff\"}":  "the body is not valid UTF-8",
	} {
		_, err := decodeAny(raw)
		e, ok := errs.As(err)
		if !ok || e.Code != errs.InvalidInput || e.Message != msg || e.Details["path"] != "" {
			t.Errorf("%.40s: %v, want %q", raw, err, msg)
		}
	}
	// Too deep: the path names where the nesting went over.
	deep := `{"a":` + strings.Repeat("[", 33) + strings.Repeat("]", 33) + `}`
	_, err = decodeAny(deep)
	e, ok := errs.As(err)
	if !ok || e.Message != "the body nests deeper than 32 levels" || e.Details["path"] != "a"+strings.Repeat("[0]", 32) {
		t.Errorf("too deep: %v %v", err, e.Details)
	}
	// Past encoding/json's own 10000 levels, where this decoder meets
	// another fault first (a field of no method, a top level that is not
	// an object), the depth is the answer still: it was "syntax error at
	// offset 10026" (a helper's probe).
	for _, n := range []int{10000, 100000} {
		for _, raw := range []string{
			`{"tenantId": "acme", "x": ` + strings.Repeat("[", n) + strings.Repeat("]", n) + `}`,
			strings.Repeat("[", 10*n) + strings.Repeat("]", 10*n),
		} {
			_, err := decode([]byte(raw), []Field{{Name: "tenantId", Type: String}})
			if e, ok := errs.As(err); !ok || e.Message != "the body nests deeper than 32 levels" {
				t.Errorf("%d levels, %.30s: %v", n, raw, err)
			}
		}
	}
	// NUL characters anywhere, keys included, name their path.
	for raw, path := range map[string]string{
		`{"a":{"b":[1,"x\u0000"]}}`: "a.b[1]",
		`{"a":{"k\u0000":1}}`:       "a",
	} {
		_, err := decodeAny(raw)
		if e, ok := errs.As(err); !ok || e.Details["path"] != path || !strings.Contains(e.Message, "NUL") {
			t.Errorf("%s: %v", raw, err)
		}
	}
}

// The first offending field is the first in the document as sent.
func TestDecodeReportsInDocumentOrder(t *testing.T) {
	fields := []Field{
		TenantID(),
		{Name: "name", Type: String, Required: true, MaxLength: 3},
		{Name: "count", Type: Integer, Min: Int(0), Max: Int(9)},
		{Name: "doc", Type: Object, Open: true},
	}
	for i := range fields {
		fields[i].compile()
	}
	for raw, path := range map[string]string{
		`{"count":10,"name":"toolong"}`:        "count",
		`{"name":"toolong","count":10}`:        "name",
		`{"zzz":1,"name":"toolong"}`:           "zzz",
		`{"name":"ok","tenantId":"a b"}`:       "tenantId",
		`{"doc":{"x":1},"name":"ok"}`:          "tenantId",
		`{"doc":{"x":"\u0000"},"name":"long"}`: "doc.x",
	} {
		_, err := decode([]byte(raw), fields)
		if e, ok := errs.As(err); !ok || e.Details["path"] != path {
			t.Errorf("%s: %v, want path %s", raw, err, path)
		}
	}
}

// Integer fields are bounded by the int4 columns they land in unless they
// say otherwise.
func TestIntegerFieldsHaveColumnBounds(t *testing.T) {
	f := []Field{ExpectedVersion(), {Name: "n", Type: Integer}}
	for i := range f {
		f[i].compile()
	}
	for raw, ok := range map[string]bool{
		`{"expectedVersion":2147483647}`: true, `{"expectedVersion":2147483648}`: false, `{"expectedVersion":0}`: false,
		`{"n":-2147483648}`: true, `{"n":-2147483649}`: false, `{"n":1e3}`: true, `{"n":1.5}`: false,
	} {
		_, err := decode([]byte(raw), f)
		if (err == nil) != ok {
			t.Errorf("%s: %v", raw, err)
		}
	}
	// Integers past what a float64 holds exactly are refused for their
	// range as 2^53 is, not as "not an integer" (2^63 was; a helper's
	// probe); a fraction is not an integer.
	for raw, msg := range map[string]string{
		`{"n":9007199254740993}`:    "n must be in -2147483648-2147483647",
		`{"n":9223372036854775808}`: "n must be in -2147483648-2147483647",
		`{"n":-1e400}`:              "n must be in -2147483648-2147483647",
		`{"n":1e1000000000}`:        "n must be in -2147483648-2147483647",
		`{"n":2.5}`:                 "n must be an integer",
		// Exactly: float64 read these as 1 and 200 (a helper's probe).
		`{"n":1.0000000000000000000001}`: "n must be an integer",
		`{"n":200.00000000000000001}`:    "n must be an integer",
		`{"n":1e-400}`:                   "n must be an integer",
	} {
		_, err := decode([]byte(raw), f)
		if e, ok := errs.As(err); !ok || e.Message != msg {
			t.Errorf("%s: %v, want %q", raw, err, msg)
		}
	}
}

// Inputs are assigned from the decoded value: open fields as sent.
func TestAssign(t *testing.T) {
	type size struct {
		GPUs int `json:"gpus"`
	}
	type in struct {
		TenantID string          `json:"tenantId"`
		Version  *int            `json:"expectedVersion,omitempty"`
		Doc      json.RawMessage `json:"doc"`
		Labels   map[string]any  `json:"labels"`
		Size     size            `json:"size"`
		Tags     []string        `json:"tags"`
		Missing  *string         `json:"missing"`
	}
	v, err := decodeAny(`{"tenantId":"a","expectedVersion":3,"doc":{"z":1,"a":[true]},"labels":{"x":1},"size":{"gpus":2},"tags":["p","q"]}`)
	if err != nil {
		t.Fatal(err)
	}
	var got in
	if err := assign(reflect.ValueOf(&got).Elem(), v); err != nil {
		t.Fatal(err)
	}
	if got.TenantID != "a" || *got.Version != 3 || string(got.Doc) != `{"z":1,"a":[true]}` || got.Labels["x"] != 1.0 ||
		got.Size.GPUs != 2 || !reflect.DeepEqual(got.Tags, []string{"p", "q"}) || got.Missing != nil {
		t.Fatalf("%+v", got)
	}
}

// An open object says it holds anything: without additionalProperties a
// client generator reads {"type": "object"} as an empty record.
func TestOpenObjectsAllowAnyProperty(t *testing.T) {
	s := Field{Name: "x", Type: Object, Open: true}.JSONSchema()
	if s["additionalProperties"] != true {
		t.Fatalf("open object schema %v", s)
	}
	s = Field{Name: "x", Type: Object, Fields: []Field{{Name: "a", Type: String}}}.JSONSchema()
	if s["additionalProperties"] != false {
		t.Fatalf("closed object schema %v", s)
	}
}

// A null item of a typed array is refused as its type's, where a field's
// null means the field left out: it was assigned as the zero value, and a
// probe's `"macs": [null]` stored a MAC "" past the items' pattern. Free
// content keeps its nulls.
func TestDecodeRefusesNullItems(t *testing.T) {
	fields := []Field{
		TenantID(),
		{Name: "macs", Type: Array, Items: &Field{Type: String, Pattern: "^[0-9a-f]{2}$"}},
		{Name: "sizes", Type: Array, Items: &Field{Type: Object, Fields: []Field{{Name: "gpus", Type: Integer}}}},
		{Name: "doc", Type: Object, Open: true},
	}
	for i := range fields {
		fields[i].compile()
	}
	for raw, want := range map[string]string{
		`{"tenantId":"a","macs":[null]}`:          "macs[0] must be a string",
		`{"tenantId":"a","macs":["0a",null]}`:     "macs[1] must be a string",
		`{"tenantId":"a","sizes":[{},null]}`:      "sizes[1] must be an object",
		`{"tenantId":"a","macs":[""]}`:            "macs[0]",
		`{"tenantId":"a","doc":{"x":[null,1]}}`:   "",
		`{"tenantId":"a","macs":null,"sizes":[]}`: "",
	} {
		_, err := decode([]byte(raw), fields)
		if want == "" {
			if err != nil {
				t.Errorf("%s: %v", raw, err)
			}
			continue
		}
		if e, ok := errs.As(err); !ok || e.Code != errs.InvalidInput || !strings.Contains(e.Message, want) {
			t.Errorf("%s: %v, want INVALID_INPUT %q", raw, err, want)
		}
	}
}
