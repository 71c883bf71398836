package e2e

import (
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bettercompute/computed/internal/testkit"
)

// TestTypedClientSession proves the served /openapi.json with tools from
// the npm registry: @redocly/cli lints it (recommended-strict), openapi-
// typescript generates the client's types, tsc type-checks the session
// (test/clients/session.ts, strict) against them, and the compiled session
// runs through openapi-fetch against this server. The session makes every
// method call of the README's session with its inputs (pools.create with
// "policy": {"sim": {"latencyMs": 1500}} among them) and reads the audit
// trail; it also holds lines the types must refuse (@ts-expect-error), and
// tsc must fail on test/clients/type-error.ts, so the check is known to
// catch a type error.
func TestTypedClientSession(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	e := testkit.Start(t)
	res, err := http.Get(e.Server.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	doc, _ := io.ReadAll(res.Body)
	res.Body.Close()
	gen := filepath.Join(dir, ".generated")
	if err := os.MkdirAll(gen, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(gen, "openapi.json"), doc, 0o644); err != nil {
		t.Fatal(err)
	}
	m := testkit.NewMachine(t)
	machine, _ := json.Marshal(map[string]string{"csr": m.CSR, "systemUuid": m.SystemUUID, "serial": m.Serial, "mac": m.MAC})
	machineFile := filepath.Join(t.TempDir(), "machine.json")
	if err := os.WriteFile(machineFile, machine, 0o600); err != nil {
		t.Fatal(err)
	}
	node := func(args ...string) (string, error) {
		cmd := exec.Command("node", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
		out, err := cmd.CombinedOutput()
		return string(out), err
	}
	run := func(what string, args ...string) string {
		t.Helper()
		out, err := node(args...)
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return out
	}
	run("redocly lint", "node_modules/.bin/redocly", "lint", "--extends", "recommended-strict", "--format", "stylish", ".generated/openapi.json")
	run("openapi-typescript", "node_modules/.bin/openapi-typescript", ".generated/openapi.json", "-o", ".generated/api.d.ts")
	if out, err := node("node_modules/.bin/tsc", "-p", "tsconfig.type-error.json"); err == nil ||
		!strings.Contains(out, "type-error.ts(") || !strings.Contains(out, "error TS") {
		t.Fatalf("tsc accepted type-error.ts (a string failureRate): %v\n%s", err, out)
	}
	run("tsc", "node_modules/.bin/tsc", "-p", "tsconfig.json")
	out := run("the session", ".generated/session.js", e.Server.URL, e.Operator, machineFile)

	var got struct {
		TenantCreatedAt, Role, ProjectID, GotProject string
		RowVersion                                   int
		Names                                        []string
		Next                                         *string
		Missing                                      struct {
			Status int
			Code   string
		}
		Invalid struct {
			Status     int
			Code, Path string
		}
		Stored               []bool
		Changes              []string
		Policy, StoredPolicy map[string]any
		States, Desired      []string
		EventTypes           []string
		LastEvent            string
		Stops                []struct{ Principal, Kind, Resource, Outcome string }
		Refused              struct {
			Status int
			Code   string
		}
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
		t.Fatalf("session output: %v\n%s", err, out)
	}
	if got.TenantCreatedAt == "" || got.Role != "admin" || !projectIDRe.MatchString(got.ProjectID) || got.RowVersion != 1 ||
		len(got.Names) != 1 || got.Names[0] != "web" || got.Next != nil || got.GotProject != got.ProjectID {
		t.Errorf("session: %+v", got)
	}
	if got.Missing.Status != 404 || got.Missing.Code != "NOT_FOUND" {
		t.Errorf("missing project: %+v", got.Missing)
	}
	if got.Invalid.Status != 400 || got.Invalid.Code != "INVALID_INPUT" || got.Invalid.Path != "name" {
		t.Errorf("invalid name: %+v", got.Invalid)
	}
	if fmt.Sprint(got.Stored) != "[true true]" || strings.Join(got.Changes, ",") != "driver.changed,gpu.missing" {
		t.Errorf("inventory: stored %v, changes %v", got.Stored, got.Changes)
	}
	if fmt.Sprint(got.StoredPolicy) != fmt.Sprint(got.Policy) || fmt.Sprint(got.Policy) != "map[sim:map[latencyMs:1500]]" {
		t.Errorf("policy: sent %v, stored %v", got.Policy, got.StoredPolicy)
	}
	if strings.Join(got.States, ",") != "pending" || strings.Join(got.Desired, ",") != "stopped,running,running,deleted" ||
		len(got.EventTypes) == 0 || got.EventTypes[0] != "instance.created" || !eventIDRe.MatchString(got.LastEvent) {
		t.Errorf("instance: states %v, desired %v, events %v %s", got.States, got.Desired, got.EventTypes, got.LastEvent)
	}
	if len(got.Stops) != 1 || got.Stops[0].Kind != "service" || !strings.HasPrefix(got.Stops[0].Principal, "prn_") ||
		!instIDRe.MatchString(got.Stops[0].Resource) || got.Stops[0].Outcome != "success" {
		t.Errorf("audit trail: %+v", got.Stops)
	}
	if got.Refused.Status != 403 || got.Refused.Code != "PERMISSION_DENIED" {
		t.Errorf("a member's audit.list: %+v", got.Refused)
	}
}

// TestSchemaArtefactMatchesIntrospection: schema.graphql, built by
// graphql-js, prints exactly as the schema the server gives the standard
// introspection query, so client generators reading the file see what the
// server serves.
func TestSchemaArtefactMatchesIntrospection(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	e := testkit.Start(t)
	sdl, _ := filepath.Abs(filepath.Join("..", "..", "schema.graphql"))
	out, err := node(t, dir, "sdl.mjs", e.Server.URL+"/graphql", e.Operator, sdl)
	if err != nil {
		t.Fatalf("sdl.mjs: %v\n%s", err, out)
	}
	var got struct {
		Equal bool
		Lines int
		Diff  string
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil || !got.Equal || got.Lines < 500 {
		t.Fatalf("schema.graphql and the served schema differ (run make generate): %s", out)
	}
}

// TestMethodIndexSchemas: each entry of GET /api/compute carries input and
// output schemas that stand alone ($defs, no refs out of the entry) and a
// real answer validates against its output schema.
func TestMethodIndexSchemas(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	res, err := http.Get(e.Server.URL + "/api/compute")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(res.Body)
	res.Body.Close()
	var idx struct {
		Methods []struct {
			Group, Method             string
			InputSchema, OutputSchema json.RawMessage
			Errors                    []string
		}
	}
	if err := json.Unmarshal(raw, &idx); err != nil || len(idx.Methods) < 50 {
		t.Fatalf("index: %v %.300s", err, raw)
	}
	answers := map[string][]byte{
		"tenants.create": e.Must(e.Call(e.Operator, "tenants/create", map[string]any{"tenantId": "acme", "name": "Acme"})).Raw,
		"profiles.list":  e.Must(e.Call(e.Operator, "profiles/list", map[string]any{"tenantId": "acme", "limit": 2})).Raw,
	}
	// An optional field sent as null is the field left out: the server
	// takes it, and the input schema must say so (it said "string", and a
	// client validating or typed by it was told null is refused).
	nulls := map[string]map[string]any{
		"projects.create": {"tenantId": "acme", "name": "web", "description": nil},
		"tenants.list":    {"limit": nil, "cursor": nil},
		"pools.create": {"tenantId": "acme", "name": "b", "site": "fra1", "gpuModel": "H100", "sharingMode": "exclusive",
			"kind": "bare-metal", "policy": nil},
	}
	for _, m := range idx.Methods {
		key := m.Group + "." + m.Method
		for what, s := range map[string]json.RawMessage{"input": m.InputSchema, "output": m.OutputSchema} {
			if strings.Contains(string(s), `"#/components/`) {
				t.Errorf("%s: the %s schema refers out of the index: %.200s", key, what, s)
			}
			c := jsonschema.NewCompiler()
			doc, err := jsonschema.UnmarshalJSON(strings.NewReader(string(s)))
			if err == nil {
				err = c.AddResource("https://computed.invalid/"+key+"/"+what, doc)
			}
			var sch *jsonschema.Schema
			if err == nil {
				sch, err = c.Compile("https://computed.invalid/" + key + "/" + what)
			}
			if err != nil {
				t.Errorf("%s: the %s schema does not compile: %v", key, what, err)
				continue
			}
			if in, ok := nulls[key]; ok && what == "input" {
				b, _ := json.Marshal(in)
				e.Must(e.Call(e.Operator, m.Group+"/"+m.Method, in))
				v, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
				if err := sch.Validate(v); err != nil {
					t.Errorf("%s: the server takes %s, its input schema does not: %v", key, b, err)
				}
				delete(nulls, key)
			}
			if a, ok := answers[key]; ok && what == "output" {
				v, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(a)))
				if err := sch.Validate(v); err != nil {
					t.Errorf("%s: a real answer does not fit the index's output schema: %v", key, err)
				}
				delete(answers, key)
			}
		}
		if len(m.Errors) < 5 {
			t.Errorf("%s lists errors %v", key, m.Errors)
		}
	}
	if len(answers) > 0 || len(nulls) > 0 {
		t.Errorf("not in the index: %v %v", answers, nulls)
	}
}
