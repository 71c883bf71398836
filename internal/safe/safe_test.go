package safe_test

import (
	"context"
	"encoding/json"
	"go/ast"
	"go/parser"
	"go/token"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/safe"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
)

// A panic on a goroutine started through Go, or in a timer callback
// wrapped by Func, is an error log line with the request id, onPanic runs,
// and the process goes on.
func TestPanicsAreLoggedWithTheRequestID(t *testing.T) {
	var out logbuf.Buffer
	log := slog.New(slog.NewJSONHandler(&out, nil))
	ctx := reqctx.WithRequestID(context.Background(), "req_test-1234")
	cleaned := make(chan string, 2)
	safe.Go(ctx, log, "worker", func() { panic("boom") }, func() { cleaned <- "go" })
	time.AfterFunc(time.Millisecond, safe.Func(ctx, log, "timer", func() {
		var m map[string]int
		m["x"] = 1 // a nil map: a runtime error
	}, func() { cleaned <- "timer" }))
	got := map[string]bool{}
	for len(got) < 2 {
		select {
		case w := <-cleaned:
			got[w] = true
		case <-time.After(10 * time.Second):
			t.Fatalf("onPanic ran for %v only", got)
		}
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("want two log lines, got %q", out.String())
	}
	for _, l := range lines {
		var rec map[string]any
		if err := json.Unmarshal([]byte(l), &rec); err != nil {
			t.Fatal(err)
		}
		if rec["level"] != "ERROR" || rec["requestId"] != "req_test-1234" || rec["stack"] == "" || rec["panic"] == "" {
			t.Fatalf("log line: %s", l)
		}
	}
	if safe.Do(ctx, log, "fine", func() {}) {
		t.Fatal("Do reported a panic that did not happen")
	}
}

// Every goroutine and every AfterFunc callback of the server's packages
// goes through this package: a bare go statement, or a callback not
// wrapped by safe.Func, fails here.
func TestEveryGoroutineIsSafe(t *testing.T) {
	root := filepath.Join("..", "..")
	dirs := []string{"internal/server", "internal/live", "internal/instances", "internal/instances/provider",
		"internal/instances/provider/sim", "internal/loaders", "internal/registry", "internal/rest", "resolvers", "internal/ratelimit", "internal/cluster"}
	checked := 0
	for _, dir := range dirs {
		files, err := filepath.Glob(filepath.Join(root, dir, "*.go"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			if strings.HasSuffix(f, "_test.go") {
				continue
			}
			src, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			fset := token.NewFileSet()
			file, err := parser.ParseFile(fset, f, src, 0)
			if err != nil {
				t.Fatal(err)
			}
			checked++
			ast.Inspect(file, func(n ast.Node) bool {
				switch n := n.(type) {
				case *ast.GoStmt:
					t.Errorf("%s: a go statement: start goroutines with safe.Go", fset.Position(n.Pos()))
				case *ast.CallExpr:
					sel, ok := n.Fun.(*ast.SelectorExpr)
					if !ok || sel.Sel.Name != "AfterFunc" || len(n.Args) == 0 {
						return true
					}
					if pkg, ok := sel.X.(*ast.Ident); !ok || (pkg.Name != "time" && pkg.Name != "context") {
						return true
					}
					if !isSafeFunc(n.Args[len(n.Args)-1]) {
						t.Errorf("%s: an AfterFunc callback not wrapped by safe.Func", fset.Position(n.Pos()))
					}
				}
				return true
			})
		}
	}
	if checked < 20 {
		t.Fatalf("only %d files checked: the paths are wrong", checked)
	}
}

func isSafeFunc(e ast.Expr) bool {
	call, ok := e.(*ast.CallExpr)
	if !ok {
		return false
	}
	sel, ok := call.Fun.(*ast.SelectorExpr)
	if !ok {
		return false
	}
	pkg, ok := sel.X.(*ast.Ident)
	return ok && pkg.Name == "safe" && sel.Sel.Name == "Func"
}
