package e2e

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
	"github.com/bettercompute/computed/internal/testkit/logbuf"
	"github.com/bettercompute/computed/internal/testkit/wait"
)

// replica is one `computed serve` process.
type replica struct {
	cmd  *exec.Cmd
	addr string
	logs *logbuf.Buffer // its stdout and stderr
}

var (
	buildOnce sync.Once
	binPath   string
	buildErr  error
)

// computedBinary builds cmd/computed once per test binary.
func computedBinary(t testing.TB) string {
	t.Helper()
	buildOnce.Do(func() {
		dir, err := os.MkdirTemp("", "computed-bin-")
		if err != nil {
			buildErr = err
			return
		}
		binPath = filepath.Join(dir, "computed")
		out, err := exec.Command("go", "build", "-o", binPath, "github.com/bettercompute/computed/cmd/computed").CombinedOutput()
		if err != nil {
			buildErr = fmt.Errorf("go build: %v: %s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return binPath
}

func startReplica(t testing.TB, url, token string, env ...string) *replica {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := l.Addr().String()
	l.Close()
	cmd := exec.Command(computedBinary(t), "serve")
	cmd.Env = append(os.Environ(), "DATABASE_URL="+url, "COMPUTE_ADDR="+addr, "COMPUTE_BOOTSTRAP_TOKEN="+token, "COMPUTE_RATE_LIMIT=0")
	cmd.Env = append(cmd.Env, env...)
	logs := &logbuf.Buffer{}
	cmd.Stdout, cmd.Stderr = logs, logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	r := &replica{cmd: cmd, addr: addr, logs: logs}
	t.Cleanup(func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Signal(syscall.SIGTERM)
			done := make(chan struct{})
			go func() { _ = cmd.Wait(); close(done) }()
			select {
			case <-done:
			case <-time.After(10 * time.Second):
				_ = cmd.Process.Kill()
			}
		}
		if t.Failed() {
			t.Logf("replica %s log:\n%s", addr, logs.String())
		}
	})
	wait.Eventually(t, 30*time.Second, func() error {
		res, err := http.Get("http://" + addr + "/readyz")
		if err != nil {
			return fmt.Errorf("replica %s not ready (%v): %s", addr, err, logs.String())
		}
		res.Body.Close()
		if res.StatusCode != 200 {
			return fmt.Errorf("replica %s not ready (%d): %s", addr, res.StatusCode, logs.String())
		}
		return nil
	})
	return r
}

func (r *replica) call(t testing.TB, token, method string, body any) (int, map[string]any) {
	t.Helper()
	b, _ := json.Marshal(body)
	req, _ := http.NewRequest("POST", "http://"+r.addr+"/api/compute/"+method, bytes.NewReader(b))
	req.Header.Set("Authorization", "Bearer "+token)
	res, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatalf("%s: %v", method, err)
	}
	defer res.Body.Close()
	raw, _ := io.ReadAll(res.Body)
	var out map[string]any
	_ = json.Unmarshal(raw, &out)
	if res.StatusCode != 200 {
		t.Fatalf("%s: %d %s", method, res.StatusCode, raw)
	}
	return res.StatusCode, out
}

// waitAll waits until every instance is in state, reading the database.
func waitAll(t *testing.T, e *testkit.Env, ids []string, state string, timeout time.Duration) time.Duration {
	t.Helper()
	start := time.Now()
	wait.Eventually(t, timeout, func() error {
		var n int
		if err := e.DB.QueryRow(`SELECT count(*) FROM instances WHERE instance_id = ANY($1) AND state = $2`, ids, state).Scan(&n); err != nil {
			t.Fatal(err)
		}
		if n == len(ids) {
			return nil
		}
		var states string
		_ = e.DB.QueryRow(`SELECT string_agg(state || ':' || count, ', ') FROM (SELECT state, count(*)::text AS count FROM instances WHERE instance_id = ANY($1) GROUP BY state) x`, ids).Scan(&states)
		return fmt.Errorf("%d of %d instances %s (%s)", n, len(ids), state, states)
	})
	return time.Since(start)
}

// checkEvents: every instance's events are one per state move, in a legal
// order, ending at its state, none duplicated.
func checkEvents(t *testing.T, e *testkit.Env, ids []string, want []string) {
	t.Helper()
	// Events are numbered a pass after their commit (the reconciler does
	// not wait for it), and those a killed replica committed but did not
	// number are numbered by the survivor's sweep within about 3 s.
	var got map[string][]string
	for deadline := time.Now().Add(15 * time.Second); ; {
		got = map[string][]string{}
		rows, err := e.DB.Query(`SELECT resource_id, type FROM events WHERE resource_id = ANY($1) ORDER BY resource_id, seq`, ids)
		if err != nil {
			t.Fatal(err)
		}
		for rows.Next() {
			var id, typ string
			if err := rows.Scan(&id, &typ); err != nil {
				t.Fatal(err)
			}
			got[id] = append(got[id], typ)
		}
		rows.Close()
		complete := true
		for _, id := range ids {
			if len(got[id]) < len(want) {
				complete = false
			}
		}
		if complete || time.Now().After(deadline) {
			break
		}
		time.Sleep(50 * time.Millisecond) // waiting for the condition: every instance's events numbered
	}
	for _, id := range ids {
		if strings.Join(got[id], ",") != strings.Join(want, ",") {
			t.Fatalf("instance %s events %v, want %v", id, got[id], want)
		}
	}
}

// TestTwoReplicasAndSIGKILL: two `computed serve` processes on one
// PostgreSQL. Instances created through one are driven to running by
// both; then one is killed with SIGKILL while it works a burst, and the
// other finishes everything: no instance stuck, no event lost or
// duplicated.
func TestTwoReplicasAndSIGKILL(t *testing.T) {
	if testing.Short() {
		t.Skip("builds and runs the server binary")
	}
	t.Parallel()
	e := testkit.StartDB(t)
	const token = "bco_replica-test-operator"
	a := startReplica(t, e.DB.URL, token)
	b := startReplica(t, e.DB.URL, token)

	a.call(t, token, "tenants/create", map[string]any{"tenantId": "acme", "name": "Acme"})
	_, tok := a.call(t, token, "tokens/create", map[string]any{"tenantId": "acme", "name": "ops", "role": "admin"})
	admin := tok["secret"].(string)
	_, p := a.call(t, admin, "pools/create", map[string]any{"tenantId": "acme", "name": "vps", "site": "fra1", "gpuModel": "H100",
		"sharingMode": "exclusive", "kind": "vps-provider", "policy": map[string]any{"sim": map[string]any{"latencyMs": 100}}})
	pool := p["poolId"].(string)

	create := func(r *replica, n int, prefix string) []string {
		ids := make([]string, n)
		var wg sync.WaitGroup
		for k := 0; k < n; k++ {
			wg.Add(1)
			go func(k int) {
				defer wg.Done()
				_, out := r.call(t, admin, "instances/create", instanceIn("acme", pool, fmt.Sprintf("%s-%d", prefix, k), 1))
				ids[k] = out["instanceId"].(string)
			}(k)
		}
		wg.Wait()
		return ids
	}

	// Phase 1: created through A, worked by both.
	first := create(a, 40, "one")
	waitAll(t, e, first, "running", 30*time.Second)
	var workers int
	if err := e.DB.QueryRow(`SELECT count(DISTINCT split_part(attempted_by[1], '-', 3)) FROM river_job WHERE kind = 'vps.instances'
		AND args->>'instanceId' = ANY($1)`, first).Scan(&workers); err != nil {
		t.Fatal(err)
	}
	if workers != 2 {
		t.Fatalf("instances created through one replica were worked by %d replicas", workers)
	}
	checkEvents(t, e, first, []string{"instance.created", "instance.provisioning", "instance.running"})

	// Phase 2: a burst through A; kill A while it has a job running.
	second := create(a, 120, "two")
	pidA := fmt.Sprint(a.cmd.Process.Pid)
	caught := false
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) && !caught {
		var n int
		_ = e.DB.QueryRow(`SELECT count(*) FROM river_job WHERE kind = 'vps.instances' AND state = 'running'
			AND split_part(attempted_by[array_upper(attempted_by, 1)], '-', 3) = $1`, pidA).Scan(&n)
		caught = n > 0
	}
	if err := a.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	_ = a.cmd.Wait()
	killed := time.Now()
	var orphans int
	_ = e.DB.QueryRow(`SELECT count(*) FROM river_job WHERE kind = 'vps.instances' AND state = 'running'
		AND split_part(attempted_by[array_upper(attempted_by, 1)], '-', 3) = $1`, pidA).Scan(&orphans)
	t.Logf("SIGKILL with a job running on the killed replica: %v; jobs it left running: %d", caught, orphans)
	took := waitAll(t, e, second, "running", 30*time.Second)
	t.Logf("all %d instances running %s after the kill", len(second), took.Round(time.Millisecond))
	// The dead replica's running jobs are rescued (runner.Rescue, within
	// RescueEvery once a second old). The instances can all be running
	// before that: checked once, right then, the test failed with the
	// rescue still to come (CI, once: all 120 running 516 ms after the kill).
	wait.Eventually(t, 10*time.Second, func() error {
		var stuck int
		if err := e.DB.QueryRow(`SELECT count(*) FROM river_job WHERE kind = 'vps.instances' AND state = 'running' AND attempted_at < $1`, killed).Scan(&stuck); err != nil {
			return err
		}
		if stuck != 0 {
			return fmt.Errorf("%d jobs still running on the dead replica", stuck)
		}
		return nil
	})
	checkEvents(t, e, second, []string{"instance.created", "instance.provisioning", "instance.running"})

	// Phase 3: the survivor stops them all.
	var wg sync.WaitGroup
	for _, id := range second {
		wg.Add(1)
		go func(id string) {
			defer wg.Done()
			b.call(t, admin, "instances/stop", map[string]any{"tenantId": "acme", "instanceId": id})
		}(id)
	}
	wg.Wait()
	waitAll(t, e, second, "stopped", 30*time.Second)
	checkEvents(t, e, second, []string{"instance.created", "instance.provisioning", "instance.running", "instance.stopping", "instance.stopped"})
}
