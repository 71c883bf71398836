package registry

import (
	"reflect"
	"testing"

	"github.com/bettercompute/computed/internal/errs"
)

var fuzzFields = func() []Field {
	f := []Field{
		TenantID(),
		{Name: "profileId", Type: String, Required: true, MaxLength: 128, Pattern: ProfileIDPattern},
		{Name: "profileVersion", Type: Integer, Min: Int(1), Max: Int(1000000)},
		Limit(50, 200), Cursor(),
		{Name: "visibility", Type: String, Enum: []string{"private", "public"}, Default: "private"},
		{Name: "document", Type: Object, Open: true},
		{Name: "tags", Type: Array, MaxItems: 4, Items: &Field{Type: String, MaxLength: 8}},
		{Name: "size", Type: Object, Fields: []Field{{Name: "gpus", Type: Integer, Required: true, Min: Int(0)}}},
	}
	for i := range f {
		f[i].compile()
	}
	return f
}()

// FuzzDecodeInput feeds untrusted bodies to the method-surface decoder: it
// must never panic, and every rejection must be INVALID_INPUT. What it
// accepts, decoded into the Go input, the typed validator (Call's) accepts
// too and leaves as it is.
func FuzzDecodeInput(f *testing.F) {
	for _, s := range []string{
		`{}`, `{"tenantId":"acme","profileId":"gpu-base"}`, `{"tenantId":"a","profileId":"b","profileVersion":1.0}`,
		`{"tenantId":"a","profileId":"b","limit":"5"}`, `[1,2]`, `null`, `{"x":1}`, `{"tenantId":"a","profileId":"b","size":{"gpus":-1}}`,
		`{"tenantId":"a","profileId":"b","tags":["a","b","c","d","e"]}`, `{"tenantId":"a","profileId":"b","profileVersion":1e400}`,
		`{"a":[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]}`, `{"tenantId":"a"} {}`, `{"tenantId":"A"}}`, `{"tenantId":"A"}]`, `{"a":"\u0000"}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, raw []byte) {
		v, err := decode(raw, fuzzFields)
		if err != nil {
			if errs.CodeOf(err) != errs.InvalidInput {
				t.Fatalf("rejection with code %s: %v", errs.CodeOf(err), err)
			}
			return
		}
		in := new(fuzzInput)
		if err := assign(reflect.ValueOf(in).Elem(), v); err != nil {
			t.Fatalf("assign: %v", err)
		}
		typed := *in
		if err := validateTyped(fuzzFields, &typed); err != nil {
			t.Fatalf("the typed validator refuses what the body decoder accepted: %v", err)
		}
		if !reflect.DeepEqual(typed, *in) {
			t.Fatalf("the typed validator changed the input:\n%+v\n%+v", *in, typed)
		}
	})
}
