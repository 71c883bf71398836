package loadtest

import (
	"bytes"
	"context"
	_ "embed"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/bettercompute/computed/internal/pki"
)

//go:embed testdata/h100-node.json
var h100 []byte

// seedState is what a seeded cluster keeps in Dir/seed.json, so that later
// runs reuse the fleet.
type seedState struct {
	Tenant  string `json:"tenant"`
	Admin   string `json:"admin"`
	Pools   int    `json:"pools"`
	PerPool int    `json:"perPool"`
}

// client calls the method surface.
type client struct {
	base string
	http *http.Client
}

func (c *client) call(ctx context.Context, token, method string, in any, out any) error {
	body, _ := json.Marshal(in)
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, c.base+"/api/compute/"+method, bytes.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("%s: %w", method, err)
	}
	defer resp.Body.Close()
	raw, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("%s: %d %.500s", method, resp.StatusCode, raw)
	}
	if out != nil {
		return json.Unmarshal(raw, out)
	}
	return nil
}

// machineReport is the H100 report with device ids unique to machine n and
// the report's driver version v.
func machineReport(n int, driver string) map[string]any {
	var r map[string]any
	_ = json.Unmarshal(h100, &r)
	for i, g := range r["gpus"].([]any) {
		g.(map[string]any)["uuid"] = fmt.Sprintf("GPU-%08x-0000-4000-8000-%012x", n, i)
	}
	for i, d := range r["disks"].([]any) {
		d.(map[string]any)["wwn"] = fmt.Sprintf("eui.%08x%08x", n, i)
	}
	for i, c := range r["nics"].([]any) {
		c.(map[string]any)["mac"] = fmt.Sprintf("02:%02x:%02x:%02x:%02x:%02x", i, byte(n>>24), byte(n>>16), byte(n>>8), byte(n))
	}
	r["system"].(map[string]any)["serial"] = fmt.Sprintf("SN%06d", n)
	r["system"].(map[string]any)["uuid"] = fmt.Sprintf("4c4c4544-%04x-4b10-8033-%012x", n>>16, n)
	if driver != "" {
		r["drivers"].(map[string]any)["nvidia"] = driver
	}
	return r
}

// seed makes the fleet through the method surface, as a user would: the
// tenant and an admin token (operator), the pools, a join token per pool,
// every node's join (a CSR of a fresh key pair, token attestor) and two
// inventory reports per node (the second with a newer driver), with the
// node's own credential.
func seed(ctx context.Context, c *client, operator string, pools, perPool int, logf func(string, ...any)) (*seedState, error) {
	st := &seedState{Tenant: "fleet", Pools: pools, PerPool: perPool}
	if err := c.call(ctx, operator, "tenants/create", map[string]any{"tenantId": st.Tenant, "name": "Fleet"}, nil); err != nil {
		return nil, err
	}
	var tok struct {
		Secret string `json:"secret"`
	}
	if err := c.call(ctx, operator, "tokens/create", map[string]any{"tenantId": st.Tenant, "name": "loadtest", "role": "admin"}, &tok); err != nil {
		return nil, err
	}
	st.Admin = tok.Secret
	type job struct{ n, pool int }
	jobs := make(chan job)
	var (
		mu       sync.Mutex
		firstErr error
		done     int
	)
	joinTokens := make([]string, pools)
	for p := 0; p < pools; p++ {
		var pool struct {
			PoolID string `json:"poolId"`
		}
		if err := c.call(ctx, st.Admin, "pools/create", map[string]any{"tenantId": st.Tenant, "name": fmt.Sprintf("pool-%02d", p),
			"site": fmt.Sprintf("site-%d", p%5), "gpuModel": "H100-SXM5-80GB", "sharingMode": "exclusive", "kind": "bare-metal"}, &pool); err != nil {
			return nil, err
		}
		var jt struct {
			Secret string `json:"secret"`
		}
		if err := c.call(ctx, st.Admin, "joinTokens/create", map[string]any{"tenantId": st.Tenant, "poolId": pool.PoolID, "maxUses": perPool}, &jt); err != nil {
			return nil, err
		}
		joinTokens[p] = jt.Secret
	}
	start := time.Now()
	var wg sync.WaitGroup
	for w := 0; w < 4; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j := range jobs {
				err := joinAndReport(ctx, c, joinTokens[j.pool], j.n)
				mu.Lock()
				if err != nil && firstErr == nil {
					firstErr = err
				}
				done++
				if done%250 == 0 {
					logf("seeded %d of %d nodes (%.0f s)", done, pools*perPool, time.Since(start).Seconds())
				}
				mu.Unlock()
			}
		}()
	}
	for p := 0; p < pools; p++ {
		for i := 0; i < perPool; i++ {
			mu.Lock()
			failed := firstErr != nil
			mu.Unlock()
			if failed {
				break
			}
			jobs <- job{n: p*perPool + i, pool: p}
		}
	}
	close(jobs)
	wg.Wait()
	if firstErr != nil {
		return nil, firstErr
	}
	return st, nil
}

func joinAndReport(ctx context.Context, c *client, joinToken string, n int) error {
	_, csr, err := pki.NewCSR("machine")
	if err != nil {
		return err
	}
	var joined struct {
		Status     string `json:"status"`
		NodeID     string `json:"nodeId"`
		Credential string `json:"credential"`
	}
	err = c.call(ctx, "", "nodes/join", map[string]any{"joinToken": joinToken, "csr": csr, "attestor": "token",
		"hardware": map[string]any{"systemUuid": fmt.Sprintf("4c4c4544-%04x-4b10-8033-%012x", n>>16, n),
			"serial": fmt.Sprintf("SN%06d", n), "macs": []string{fmt.Sprintf("02:00:%02x:%02x:%02x:%02x", byte(n>>24), byte(n>>16), byte(n>>8), byte(n))}}}, &joined)
	if err != nil {
		return err
	}
	if joined.Status != "admitted" {
		return fmt.Errorf("node %d: join answered %q", n, joined.Status)
	}
	for _, driver := range []string{"", "570.124.06"} {
		if err := c.call(ctx, joined.Credential, "inventory/report", map[string]any{"nodeId": joined.NodeID, "sections": machineReport(n, driver)}, nil); err != nil {
			return err
		}
	}
	return nil
}

func readSeed(path string) (*seedState, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var st seedState
	return &st, json.Unmarshal(b, &st)
}
