package registry

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

func TestDecodeObjectRejectsDuplicateKeys(t *testing.T) {
	for _, tc := range []struct{ raw, path string }{
		{`{"tenantId":"a","tenantId":"b"}`, "tenantId"},
		{`{"tenantId":"a","profileId":"p","tenant\u0049d":"b"}`, "tenantId"},
		{`{"document":{"id":"x","id":"y"}}`, "document.id"},
		{`{"document":{"steps":[{"use":"disk.wipe"},{"use":"os.install","with":{},"use":"x"}]}}`, "document.steps[1].use"},
		{`{"a":[[{"b":{"c":1,"c":2}}]]}`, "a[0][0].b.c"},
		{`{"a":{},"b":[],"a":null}`, "a"},
	} {
		_, err := decodeObject([]byte(tc.raw))
		e, ok := errs.As(err)
		if !ok || e.Code != errs.InvalidInput {
			t.Fatalf("%s: %v, want INVALID_INPUT", tc.raw, err)
		}
		if e.Details["path"] != tc.path || !strings.HasPrefix(e.Message, "duplicate key ") {
			t.Fatalf("%s: path %q message %q, want path %q", tc.raw, e.Details["path"], e.Message, tc.path)
		}
	}
}

func TestDecodeObjectKeepsBehaviour(t *testing.T) {
	// Same keys in different objects are not duplicates; numbers stay exact.
	m, err := decodeObject([]byte(` {"a":{"id":1},"b":{"id":1.50},"c":[{"id":9007199254740993},{"id":"x"}],"d":[],"e":{}} `))
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]any{
		"a": map[string]any{"id": json.Number("1")},
		"b": map[string]any{"id": json.Number("1.50")},
		"c": []any{map[string]any{"id": json.Number("9007199254740993")}, map[string]any{"id": "x"}},
		"d": []any{},
		"e": map[string]any{},
	}
	if !reflect.DeepEqual(m, want) {
		t.Fatalf("got %#v", m)
	}
	if m, err := decodeObject([]byte(`null`)); err != nil || len(m) != 0 || m == nil {
		t.Fatalf("null body: %v %v", m, err)
	}
	// The body is level 0: 32 nested arrays under a field reach level 32.
	ok32 := `{"a":` + strings.Repeat("[", 32) + strings.Repeat("]", 32) + `}`
	if _, err := decodeObject([]byte(ok32)); err != nil {
		t.Fatalf("32 levels: %v", err)
	}
	for raw, msg := range map[string]string{
		``:                 "the body is not valid JSON: malformed JSON",
		`{"a":`:            "the body is not valid JSON: malformed JSON",
		`{"a":1,}`:         "the body is not valid JSON: syntax error at offset 7",
		`{} {}`:            "the body holds more than one JSON value",
		`[{"a":1}]`:        "the body must be a JSON object",
		`"x"`:              "the body must be a JSON object",
		"{\"a\":\"\xff\"}": "the body is not valid UTF-8",
	} {
		_, err := decodeObject([]byte(raw))
		e, ok := errs.As(err)
		if !ok || e.Code != errs.InvalidInput || e.Message != msg || e.Details["path"] != "" {
			t.Errorf("%.40s: %v, want %q", raw, err, msg)
		}
	}
	// Too deep: the path names where the nesting went over.
	deep := `{"a":` + strings.Repeat("[", 33) + strings.Repeat("]", 33) + `}`
	_, err = decodeObject([]byte(deep))
	e, ok := errs.As(err)
	if !ok || e.Message != "the body nests deeper than 32 levels" || e.Details["path"] != "a"+strings.Repeat("[0]", 32) {
		t.Errorf("too deep: %v %v", err, e.Details)
	}
}
