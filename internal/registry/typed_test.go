package registry

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
)

// fuzzInput is the Go input type of fuzzFields.
type fuzzInput struct {
	TenantID       string          `json:"tenantId"`
	ProfileID      string          `json:"profileId"`
	ProfileVersion *int            `json:"profileVersion"`
	Limit          int             `json:"limit"`
	Cursor         string          `json:"cursor"`
	Visibility     string          `json:"visibility"`
	Document       json.RawMessage `json:"document"`
	Tags           []string        `json:"tags"`
	Size           *struct {
		GPUs int `json:"gpus"`
	} `json:"size"`
}

// bodyInput decodes a body as the method surface does.
func bodyInput(t *testing.T, raw string) (*fuzzInput, error) {
	t.Helper()
	v, err := decode([]byte(raw), fuzzFields)
	if err != nil {
		return nil, err
	}
	in := new(fuzzInput)
	if err := assign(reflect.ValueOf(in).Elem(), v); err != nil {
		t.Fatalf("assign %s: %v", raw, err)
	}
	return in, nil
}

func TestFuzzInputMatchesFields(t *testing.T) {
	checkInputType("fuzz", fuzzFields, reflect.TypeFor[fuzzInput]()) // panics on a mismatch
}

// A typed input and the body that encodes it meet the same rules: the
// same error (code, path, message) or both pass with the same input.
func TestTypedMatchesBody(t *testing.T) {
	for _, body := range []string{
		`{"tenantId":"acme","profileId":"gpu-base"}`,
		`{"tenantId":"acme","profileId":"gpu-base","profileVersion":3,"limit":7,"cursor":"c","visibility":"public"}`,
		`{"tenantId":"a b","profileId":"gpu-base"}`,
		`{"tenantId":"acme","profileId":""}`,
		`{"tenantId":"","profileId":"gpu-base"}`,
		`{"tenantId":"acme","profileId":"gpu-base","profileVersion":0}`,
		`{"tenantId":"acme","profileId":"gpu-base","profileVersion":1000001}`,
		`{"tenantId":"acme","profileId":"gpu-base","limit":201}`,
		`{"tenantId":"acme","profileId":"gpu-base","visibility":"secret"}`,
		`{"tenantId":"acme","profileId":"gpu-base","cursor":"` + strings.Repeat("x", 257) + `"}`,
		`{"tenantId":"acme","profileId":"gpu-base","tags":["a","b","c","d","e"]}`,
		`{"tenantId":"acme","profileId":"gpu-base","tags":["a","123456789"]}`,
		`{"tenantId":"acme","profileId":"gpu-base","size":{"gpus":-1}}`,
		`{"tenantId":"acme","profileId":"gpu-base","size":{"gpus":2}}`,
		`{"tenantId":"acme","profileId":"gpu-base","document":{"a":[1,{"b":"\u0000"}]}}`,
		`{"tenantId":"acme","profileId":"gpu-base","document":{"k\u0000":1}}`,
		`{"tenantId":"acme","profileId":"gpu-base","document":` + strings.Repeat(`{"a":`, 40) + `1` + strings.Repeat(`}`, 40) + `}`,
		`{"tenantId":"acme","profileId":"gpu-base","document":{"steps":[{"use":"x"}]}}`,
		`{"tenantId":"acme","profileId":"gpu-b\u0000ase"}`,
	} {
		var typed fuzzInput
		if err := json.Unmarshal([]byte(body), &typed); err != nil {
			t.Fatalf("%s: %v", body, err)
		}
		fromBody, berr := bodyInput(t, body)
		terr := validateTyped(fuzzFields, &typed)
		if (berr == nil) != (terr == nil) {
			t.Errorf("%s:\n body  %v\n typed %v", body, berr, terr)
			continue
		}
		if berr != nil {
			be, _ := errs.As(berr)
			te, ok := errs.As(terr)
			if !ok || be.Code != te.Code || be.Message != te.Message || !reflect.DeepEqual(be.Details, te.Details) {
				t.Errorf("%s:\n body  %#v\n typed %#v", body, be, terr)
			}
			continue
		}
		// The document keeps its bytes as sent either way; compare the rest.
		fromBody.Document, typed.Document = nil, nil
		if !reflect.DeepEqual(*fromBody, typed) {
			t.Errorf("%s:\n body  %+v\n typed %+v", body, *fromBody, typed)
		}
	}
}

// Defaults are filled in, and Call's copy leaves the caller's value alone.
func TestTypedDefaults(t *testing.T) {
	in := fuzzInput{TenantID: "acme", ProfileID: "p"}
	if err := validateTyped(fuzzFields, &in); err != nil {
		t.Fatal(err)
	}
	if in.Limit != 50 || in.Visibility != "private" {
		t.Errorf("defaults: limit %d visibility %q", in.Limit, in.Visibility)
	}
	// A required field of a non-pointer type is present even when empty,
	// as a body's "" is.
	in = fuzzInput{ProfileID: "p"}
	err := validateTyped(fuzzFields, &in)
	if e, ok := errs.As(err); !ok || !strings.Contains(e.Message, "tenantId does not match") {
		t.Errorf("empty tenantId: %v", err)
	}
}

// A method whose fields its input type cannot hold stops the start.
func TestCheckInputTypePanics(t *testing.T) {
	for name, typ := range map[string]reflect.Type{
		"missing field": reflect.TypeFor[struct {
			TenantID string `json:"tenantId"`
		}](),
		"wrong type": reflect.TypeFor[struct {
			TenantID  string `json:"tenantId"`
			ProfileID int    `json:"profileId"`
		}](),
	} {
		func() {
			defer func() {
				if recover() == nil {
					t.Errorf("%s: no panic", name)
				}
			}()
			checkInputType("t", fuzzFields[:2], typ)
		}()
	}
}

type poolOut struct {
	PoolID string `json:"poolId"`
	Name   string `json:"name"`
}

type instanceOut struct {
	poolOut
	InstanceID string  `json:"instanceId"`
	NodeID     *string `json:"nodeId"`
}

// auditResource finds the created resource in the output by the fields
// Def found once, the most specific set id first.
func TestAuditResourceFromOutput(t *testing.T) {
	node := "nod_1"
	for _, c := range []struct {
		out  any
		want string
	}{
		{&poolOut{PoolID: "pol_1"}, "pool/pol_1"},
		{&instanceOut{poolOut: poolOut{PoolID: "pol_1"}, InstanceID: "ins_1", NodeID: &node}, "instance/ins_1"},
		{&instanceOut{poolOut: poolOut{PoolID: "pol_1"}, NodeID: &node}, "node/nod_1"},
		{&instanceOut{poolOut: poolOut{PoolID: "pol_1"}}, "pool/pol_1"},
		{&instanceOut{}, "tenant/acme"},
		{(*instanceOut)(nil), "tenant/acme"},
	} {
		m := &Method{outputID: outputIDs(reflect.TypeOf(c.out))}
		r := auditResource(m, authz.Resource{Type: authz.Tenant, TenantID: "acme"}, c.out)
		if got := strings.TrimPrefix(r.Type, "compute-") + "/" + r.ID; got != c.want {
			t.Errorf("%T %+v: %s, want %s", c.out, c.out, got, c.want)
		}
	}
}
