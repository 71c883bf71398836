package e2e

import (
	"encoding/json"
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
// runs through openapi-fetch against this server: a tenant's project
// created and listed, a missing project's error code read.
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
	run := func(what string, args ...string) string {
		t.Helper()
		cmd := exec.Command("node", args...)
		cmd.Dir = dir
		cmd.Env = append(os.Environ(), "REDOCLY_TELEMETRY=off", "REDOCLY_SUPPRESS_UPDATE_NOTICE=true", "NO_COLOR=1")
		out, err := cmd.CombinedOutput()
		if err != nil {
			t.Fatalf("%s: %v\n%s", what, err, out)
		}
		return string(out)
	}
	run("redocly lint", "node_modules/.bin/redocly", "lint", "--extends", "recommended-strict", "--format", "stylish", ".generated/openapi.json")
	run("openapi-typescript", "node_modules/.bin/openapi-typescript", ".generated/openapi.json", "-o", ".generated/api.d.ts")
	run("tsc", "node_modules/.bin/tsc", "-p", "tsconfig.json")
	out := run("the session", ".generated/session.js", e.Server.URL, e.Operator)

	var got struct {
		TenantCreatedAt, Role, ProjectID string
		RowVersion                       int
		Names                            []string
		Next                             *string
		Missing                          struct {
			Status int
			Code   string
		}
		Invalid struct {
			Status     int
			Code, Path string
		}
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
		t.Fatalf("session output: %v\n%s", err, out)
	}
	if got.TenantCreatedAt == "" || got.Role != "admin" || !projectIDRe.MatchString(got.ProjectID) || got.RowVersion != 1 ||
		len(got.Names) != 1 || got.Names[0] != "web" || got.Next != nil {
		t.Errorf("session: %+v", got)
	}
	if got.Missing.Status != 404 || got.Missing.Code != "NOT_FOUND" {
		t.Errorf("missing project: %+v", got.Missing)
	}
	if got.Invalid.Status != 400 || got.Invalid.Code != "INVALID_INPUT" || got.Invalid.Path != "name" {
		t.Errorf("invalid name: %+v", got.Invalid)
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
	if len(answers) > 0 {
		t.Errorf("not in the index: %v", answers)
	}
}
