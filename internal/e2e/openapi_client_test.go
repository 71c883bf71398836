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
