package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/bettercompute/computed/internal/testkit"
)

func clientsDir(t *testing.T) string {
	t.Helper()
	dir, _ := filepath.Abs(filepath.Join("..", "..", "test", "clients"))
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "graphql-http")); err != nil {
		t.Fatalf("the client packages are not installed: run make audit-deps (npm ci in test/clients)")
	}
	return dir
}

func node(t *testing.T, dir string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("node", args...)
	cmd.Dir = dir
	out, err := cmd.CombinedOutput()
	return string(out), err
}

// TestGraphQLOverHTTPAudit runs graphql-http's audit suite: no audit may
// error. Its warnings are explained in docs/graphql.md.
func TestGraphQLOverHTTPAudit(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	e := testkit.Start(t)
	out, err := node(t, dir, "audit.mjs", e.Server.URL+"/graphql", e.Operator)
	if err != nil {
		t.Fatalf("audit failed: %v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	var sum struct{ Total, Ok, Warn, Error int }
	if err := json.Unmarshal([]byte(lines[len(lines)-1]), &sum); err != nil || sum.Total < 50 || sum.Error != 0 {
		t.Fatalf("audit summary %+v: %s", sum, out)
	}
	t.Logf("graphql-http audit: %s", out)
}

// TestGraphQLTransportWS uses a real graphql-transport-ws client: the token
// goes in connection_init; without it the server closes with 4403.
func TestGraphQLTransportWS(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	e.Must(e.Call(admin, "projects/create", map[string]any{"tenantId": "acme", "name": "ws"}))
	ws := "ws" + strings.TrimPrefix(e.Server.URL, "http") + "/graphql"
	out, err := node(t, dir, "ws.mjs", ws, admin, `{ tenant(tenantId: "acme") { projects { totalCount edges { node { name } } } } }`)
	if err != nil || !strings.Contains(out, `"totalCount":1`) || !strings.Contains(out, `"name":"ws"`) {
		t.Fatalf("query over websocket: %v %s", err, out)
	}
	out, err = node(t, dir, "ws.mjs", ws, "", `{ viewer { name } }`)
	if err != nil || !strings.Contains(out, `"code":4403`) {
		t.Fatalf("unauthenticated websocket: want close 4403, got %v %s", err, out)
	}
	out, _ = node(t, dir, "ws.mjs", ws, "bct_unknown", `{ viewer { name } }`)
	if !strings.Contains(out, `"code":4403`) {
		t.Fatalf("unknown token over websocket: want close 4403, got %s", out)
	}
}

// TestGraphiQLInBrowser drives GraphiQL in headless Chromium (no network
// beyond this server: every asset is vendored) with a token entered in the
// page: first without a token (the page says which token to paste and
// sends no request, introspection included), then a query through the editor, the Docs pane (the schema loads by the
// standard introspection query; its search finds ComputeNode and opens it),
// and autocomplete offering tenant after "{ ten"; the console stays clean
// (no error or warning: nothing blocked by the page's CSP, no 404 for a
// favicon, no notice of a password field outside a form). Screenshots of every stage are kept in
// test/clients/artifacts/<test> when the test fails (or KEEP_SCREENSHOTS is
// set).
func TestGraphiQLInBrowser(t *testing.T) {
	t.Parallel()
	dir := clientsDir(t)
	if _, err := exec.LookPath("chromium"); err != nil {
		t.Fatalf("chromium is not installed: run make browser")
	}
	shots := filepath.Join(dir, "artifacts", t.Name())
	_ = os.RemoveAll(shots)
	if err := os.MkdirAll(shots, 0o755); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() && os.Getenv("KEEP_SCREENSHOTS") == "" {
			_ = os.RemoveAll(shots)
		} else {
			t.Logf("screenshots: %s", shots)
		}
	})
	e := testkit.Start(t)
	admin, _, _ := e.Tenant("acme")
	out, err := node(t, dir, "graphiql.mjs", e.Server.URL, admin, `{ viewer { kind } tenant(tenantId: "acme") { name } }`, shots)
	if err != nil {
		t.Fatalf("graphiql: %v\n%s", err, out)
	}
	var got struct {
		Before struct {
			Help          string
			GraphiqlShown bool
			Focused       string
			Requests      []string
		}
		Refused struct {
			Text          string
			Help          bool
			GraphiqlShown bool
		}
		Control    bool
		Unsendable struct {
			Text          string
			GraphiqlShown bool
		}
		Response struct {
			Data struct {
				Viewer struct{ Kind string }
				Tenant struct{ Name string }
			}
		}
		Blocked []string
		Docs    struct {
			Title  string
			Fields []string
		}
		Hints []string
		Ms    map[string]int
		Error string
	}
	if err := json.Unmarshal([]byte(strings.TrimSpace(out)), &got); err != nil {
		t.Fatalf("graphiql output: %v\n%s", err, out)
	}
	t.Logf("stages done after (ms): %v", got.Ms)
	if got.Error != "" {
		t.Fatalf("graphiql: %s\n%s", got.Error, out)
	}
	// Before a token is pasted: no request at all (no UNAUTHENTICATED in a
	// results pane), and the page says which token to paste.
	if len(got.Before.Requests) > 0 || got.Before.GraphiqlShown || got.Before.Focused != "token" ||
		!strings.Contains(got.Before.Help, "$COMPUTE_DATA_DIR/operator-token") || !strings.Contains(got.Before.Help, "tokens.create") {
		t.Errorf("GraphiQL without a token: %+v", got.Before)
	}
	// A token the server refuses: said at once, GraphiQL not mounted.
	if !strings.Contains(got.Refused.Text, "refused this token") || !got.Refused.Help || got.Refused.GraphiqlShown {
		t.Errorf("GraphiQL with a refused token: %+v", got.Refused)
	}
	if !strings.Contains(got.Unsendable.Text, "outside Latin-1") || got.Unsendable.GraphiqlShown || got.Control {
		t.Errorf("GraphiQL with a token no header holds: %+v", got.Unsendable)
	}
	if got.Response.Data.Viewer.Kind != "service" || got.Response.Data.Tenant.Name != "Tenant acme" || len(got.Blocked) > 0 {
		t.Errorf("graphiql query: %s", out)
	}
	if got.Docs.Title != "ComputeNode" || !slices.Contains(got.Docs.Fields, "inventory") || !slices.Contains(got.Docs.Fields, "state") {
		t.Errorf("the Docs pane's ComputeNode: %+v", got.Docs)
	}
	if !slices.Contains(got.Hints, "tenant") {
		t.Errorf("autocomplete after \"{ ten\" offers %v, not tenant", got.Hints)
	}
}
