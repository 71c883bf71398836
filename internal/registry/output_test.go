package registry_test

import (
	"context"
	"encoding/json"
	"github.com/bettercompute/computed/internal/authz"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
)

// Every output field has a schema that says something: a json.RawMessage or
// interface field needs a `schema` tag naming what its package validates.
func TestOutputsAreTyped(t *testing.T) {
	reg := app.Registry(nil, nil, nil, nil)
	if u := reg.UntypedOutputs(); len(u) > 0 {
		t.Fatalf("output fields without a schema (tag them schema:\"Name\" and define Name): %v", u)
	}
	for _, m := range reg.Methods() {
		if len(reg.OutputSchema(m)) == 0 {
			t.Errorf("%s has no output schema", m.Key())
		}
	}
}

type inner struct {
	A string `json:"a"`
}

type Embedded struct {
	E int `json:"e"`
}

type sample struct {
	Embedded
	Name    string          `json:"name"`
	Opt     string          `json:"opt,omitempty"`
	Ptr     *int            `json:"ptr"`
	PtrOpt  *int            `json:"ptrOpt,omitempty"`
	At      time.Time       `json:"at"`
	List    []inner         `json:"list"`
	Map     map[string]bool `json:"map"`
	Doc     json.RawMessage `json:"doc" schema:"TestDoc"`
	Hidden  string          `json:"-"`
	private int
}

var _ = registry.DefineSchema("TestDoc", `{"$schema": "x", "$id": "y", "type": "object"}`)

// The reflection follows encoding/json.
func TestOutputReflection(t *testing.T) {
	m := registry.Def(registry.Method{Group: "t", Name: "sample", Kind: registry.Read, Permission: authz.PoolsRead, Resource: authz.Tenant, Module: "t", Phase: "v0"}, nil,
		func(context.Context, store.Q, *struct{}) (*sample, error) { return nil, nil })
	reg := registry.New(nil, nil, nil, nil, []registry.Method{m})
	out := reg.OutputSchema(reg.Methods()[0])
	c := reg.Components()
	got, _ := json.Marshal(c["sample"])
	want := `{"properties":{"at":{"format":"date-time","type":"string"},"doc":{"$ref":"#/components/schemas/TestDoc"},"e":{"type":"integer"},"list":{"items":{"$ref":"#/components/schemas/inner"},"type":"array"},"map":{"additionalProperties":{"type":"boolean"},"type":"object"},"name":{"type":"string"},"opt":{"type":"string"},"ptr":{"type":["integer","null"]},"ptrOpt":{"type":"integer"}},"required":["e","name","ptr","at","list","map","doc"],"type":"object"}`
	if string(got) != want {
		t.Errorf("sample:\n got %s\nwant %s", got, want)
	}
	if !reflect.DeepEqual(out, map[string]any{"$ref": "#/components/schemas/sample"}) {
		t.Errorf("output: %v", out)
	}
	doc, _ := json.Marshal(c["TestDoc"])
	if string(doc) != `{"type":"object"}` {
		t.Errorf("TestDoc: %s", doc)
	}
}

// Every method's handler is a named function a reader can open: the one
// its registration names (docs/api/handlers.md lists them).
func TestHandlersAreNamedFunctions(t *testing.T) {
	reg := app.Registry(nil, nil, nil, nil)
	for _, m := range reg.Methods() {
		name := m.HandlerName()
		if name == "" || strings.Contains(name, ".func") {
			t.Errorf("%s: the handler %q is not a named function: register a named function (or method)", m.Key(), name)
		}
		if m.InputType() == nil || m.OutputType() == nil {
			t.Errorf("%s: no input or output type", m.Key())
		}
	}
}
