package e2e

import (
	"context"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"syscall"
	"testing"
	"time"
)

// readmeBlocks returns the bodies of the README's code blocks fenced as
// "```sh <marker>", in order.
func readmeBlocks(t *testing.T, readme, marker string) []string {
	t.Helper()
	re := regexp.MustCompile("(?ms)^```sh " + regexp.QuoteMeta(marker) + "[ \t]*\n(.*?)^```[ \t]*$")
	var out []string
	for _, m := range re.FindAllStringSubmatch(readme, -1) {
		out = append(out, m[1])
	}
	return out
}

// TestReadmeSession runs the README's session as written: every block
// fenced "```sh session", in order, as one bash script (-e -o pipefail, so
// a failing step fails the test) from the repository root, with the
// environment pointing the blocks' own `make run` at a fresh embedded
// database in a temporary directory and a free port. Then the "```sh reset"
// block, the session again (a second run must work after the reset) and
// the reset again.
func TestReadmeSession(t *testing.T) {
	t.Parallel()
	for _, tool := range []string{"bash", "make", "curl", "jq", "openssl", "timeout"} {
		if _, err := exec.LookPath(tool); err != nil {
			t.Fatalf("the README's session needs %s", tool)
		}
	}
	repo, _ := filepath.Abs(filepath.Join("..", ".."))
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	session, reset := readmeBlocks(t, string(b), "session"), readmeBlocks(t, string(b), "reset")
	if len(session) < 2 || len(reset) != 1 {
		t.Fatalf("README: %d session blocks and %d reset blocks; want at least 2 and exactly 1", len(session), len(reset))
	}
	all := strings.Join(session, "\n")
	// The session's first lines start a server only when none answers:
	// run again while the session's server runs, they must leave it be
	// (a second make run would fail: "data directory ... in use").
	var start []string
	for _, line := range strings.Split(session[0], "\n") {
		start = append(start, line)
		if strings.Contains(line, "make run") {
			break
		}
	}
	if len(start) == 0 || !strings.Contains(start[len(start)-1], "make run") {
		t.Fatal("README: the first session block starts no server")
	}
	again := "( " + strings.Join(start, "\n") + "\nwait $! ) && echo '--- no second server ---'\n"
	script := all + "\n" + again + reset[0] + "\necho '--- second run ---'\n" + all + "\n" + reset[0] + "\n"

	// The embedded database runs as the postgres user, which must be able
	// to enter every parent of the data directory (t.TempDir is 0700).
	tmp, err := os.MkdirTemp("", "computed-readme-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(tmp) })
	if err := os.Chmod(tmp, 0o755); err != nil {
		t.Fatal(err)
	}
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()

	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "bash", "-e", "-o", "pipefail", "-c", script)
	cmd.Dir = repo
	var env []string
	for _, kv := range os.Environ() {
		switch k, _, _ := strings.Cut(kv, "="); k {
		case "DATABASE_URL", "COMPUTE_BOOTSTRAP_TOKEN", "COMPUTE_DATA_DIR", "COMPUTE_ADDR", "MAKEFLAGS", "MAKELEVEL":
			continue
		}
		env = append(env, kv)
	}
	cmd.Env = append(env, "COMPUTE_DATA_DIR="+filepath.Join(tmp, "data"), "COMPUTE_ADDR="+addr)
	// Its own process group, so whatever the script left running is
	// stopped with it (the server stops its PostgreSQL on SIGTERM).
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Cancel = func() error { return syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM) }
	cmd.WaitDelay = 10 * time.Second
	out, err := cmd.CombinedOutput()
	if cmd.Process != nil {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
	}
	text := string(out)
	if err != nil {
		t.Fatalf("the README's session failed: %v\n%s", err, tail(text, 6000))
	}
	if !strings.Contains(text, "--- no second server ---") || strings.Contains(text, "in use") {
		t.Errorf("the session's first lines, run again while its server runs, started another:\n%s", tail(text, 4000))
	}
	first, second, ok := strings.Cut(text, "--- second run ---")
	if !ok {
		t.Fatalf("no second run:\n%s", tail(text, 6000))
	}
	for i, run := range []string{first, second} {
		for _, want := range []string{`"projectId":"prj_`, `"totalCount":1`, `"type":"gpu.missing"`, `"type":"driver.changed"`, `"type":"GPU_MISSING"`,
			`"outcome":"success","clientAddress":"127.0.0.1"`} {
			if !strings.Contains(run, want) {
				t.Errorf("run %d of the session: no %s in its output:\n%s", i+1, want, tail(run, 4000))
			}
		}
	}
	if _, err := os.Stat(filepath.Join(repo, "node.key")); err == nil {
		t.Errorf("the session left node.key in the checkout")
	}
	if _, err := os.Stat(filepath.Join(tmp, "data")); err == nil {
		t.Errorf("the reset block left the data directory")
	}
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}
