package e2e

import (
	"encoding/json"
	"math/big"
	"net/http"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/bettercompute/computed/internal/testkit"
)

// integerField is one integer input field of a method, as the served
// OpenAPI document states it.
type integerField struct {
	method   string // group/name
	path     []string
	min, max *float64
}

// integerFields walks every method's request schema.
func integerFields(t *testing.T, e *testkit.Env) []integerField {
	t.Helper()
	res, err := http.Get(e.Server.URL + "/openapi.json")
	if err != nil {
		t.Fatal(err)
	}
	defer res.Body.Close()
	var doc map[string]any
	if err := json.NewDecoder(res.Body).Decode(&doc); err != nil {
		t.Fatal(err)
	}
	comps := doc["components"].(map[string]any)["schemas"].(map[string]any)
	var out []integerField
	var walk func(method string, s map[string]any, path []string)
	walk = func(method string, s map[string]any, path []string) {
		if ref, ok := s["$ref"].(string); ok {
			s = comps[ref[strings.LastIndex(ref, "/")+1:]].(map[string]any)
		}
		isInt := s["type"] == "integer"
		if list, ok := s["type"].([]any); ok {
			for _, x := range list {
				isInt = isInt || x == "integer"
			}
		}
		if isInt {
			f := integerField{method: method, path: append([]string{}, path...)}
			if v, ok := s["minimum"].(float64); ok {
				f.min = &v
			}
			if v, ok := s["maximum"].(float64); ok {
				f.max = &v
			}
			out = append(out, f)
		}
		if props, ok := s["properties"].(map[string]any); ok {
			for k, v := range props {
				walk(method, v.(map[string]any), append(path, k))
			}
		}
		if items, ok := s["items"].(map[string]any); ok {
			walk(method, items, append(path, "0"))
		}
	}
	for p, item := range doc["paths"].(map[string]any) {
		op := item.(map[string]any)["post"].(map[string]any)
		s := op["requestBody"].(map[string]any)["content"].(map[string]any)["application/json"].(map[string]any)["schema"].(map[string]any)
		walk(strings.TrimPrefix(p, "/api/compute/"), s, nil)
	}
	sort.Slice(out, func(i, j int) bool {
		return out[i].method+strings.Join(out[i].path, ".") < out[j].method+strings.Join(out[j].path, ".")
	})
	return out
}

// set puts v at path in a copy of body (arrays: the first item).
func set(body map[string]any, path []string, v any) map[string]any {
	b, _ := json.Marshal(body)
	var out map[string]any
	_ = json.Unmarshal(b, &out)
	var cur any = out
	for i, k := range path {
		last := i == len(path)-1
		switch c := cur.(type) {
		case map[string]any:
			if last {
				c[k] = v
				return out
			}
			if _, ok := c[k]; !ok {
				if path[i+1] == "0" {
					c[k] = []any{map[string]any{}}
				} else {
					c[k] = map[string]any{}
				}
			}
			cur = c[k]
		case []any:
			if last {
				c[0] = v
				return out
			}
			cur = c[0]
		}
	}
	return out
}

// beside is the integer bound+d, exactly.
func beside(bound float64, d int64) string {
	i, _ := big.NewFloat(bound).Int(nil)
	return i.Add(i, big.NewInt(d)).String()
}

// TestIntegerBoundsOfEveryMethod sends the bound and bound+1 of every
// integer field in the index: past a bound is INVALID_INPUT naming the
// field; at the bound is never a 500 (an int4 column used to overflow).
// A method with integer fields and no fixture here fails the test.
func TestIntegerBoundsOfEveryMethod(t *testing.T) {
	t.Parallel()
	e := testkit.Start(t)
	acme := newTenant(t, e, "acme")
	admin, member := acme.Admin.Token, acme.Member.Token
	newTenant(t, e, "beta")
	pool := e.Pool(admin, "acme", "metal")
	nodeID, cred := e.Node(admin, "acme", pool)
	vps := vpsPool(t, e, admin, "acme", "vps", nil)
	prj := newProject(t, e, member, "acme", "web")
	must(t, e.Call(member, "profiles/create", map[string]any{"tenantId": "acme", "document": profileDoc("base", 1)}))
	inst := must(t, e.Call(member, "instances/create", map[string]any{"tenantId": "acme", "poolId": vps, "name": "i1",
		"size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1}})).Str("instanceId")
	start := time.Now().UTC().Add(time.Hour)
	rsv := must(t, e.Call(member, "reservations/create", map[string]any{"tenantId": "acme", "poolId": vps,
		"size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1}, "startsAt": start.Format(time.RFC3339),
		"endsAt": start.Add(time.Hour).Format(time.RFC3339)})).Str("reservationId")
	wf := must(t, e.Call(member, "workflows/create", map[string]any{"tenantId": "acme", "nodeId": nodeID, "profileId": "base"})).Str("workflowId")

	tenant := func(more map[string]any) map[string]any {
		m := map[string]any{"tenantId": "acme"}
		for k, v := range more {
			m[k] = v
		}
		return m
	}
	type fixture struct {
		token string
		body  map[string]any
	}
	fx := map[string]fixture{
		"tenants/list":         {e.Operator, map[string]any{}},
		"tokens/list":          {admin, tenant(nil)},
		"members/list":         {admin, tenant(nil)},
		"projects/list":        {member, tenant(nil)},
		"projects/listMembers": {member, tenant(map[string]any{"projectId": prj})},
		"projects/update":      {admin, tenant(map[string]any{"projectId": prj, "description": "d"})},
		"pools/list":           {admin, tenant(nil)},
		"pools/update":         {admin, tenant(map[string]any{"poolId": pool, "name": "metal"})},
		"pools/archive":        {admin, tenant(map[string]any{"poolId": vps})},
		"pools/offer":          {admin, tenant(map[string]any{"poolId": pool, "toTenantId": "beta", "quota": map[string]any{"gpus": 1, "instances": 1}})},
		"joinTokens/create":    {admin, tenant(map[string]any{"poolId": pool})},
		"joinTokens/list":      {admin, tenant(map[string]any{"poolId": pool})},
		"joinRequests/list":    {admin, tenant(map[string]any{"poolId": pool})},
		"machines/list":        {admin, tenant(map[string]any{"poolId": pool})},
		"tpmKeys/list":         {admin, tenant(map[string]any{"poolId": pool})},
		"nodes/list":           {admin, tenant(nil)},
		"nodes/update":         {admin, tenant(map[string]any{"nodeId": nodeID, "labels": map[string]any{"a": "b"}})},
		"nodes/cordon":         {admin, tenant(map[string]any{"nodeId": nodeID})},
		"nodes/uncordon":       {admin, tenant(map[string]any{"nodeId": nodeID})},
		"nodes/remove":         {admin, tenant(map[string]any{"nodeId": nodeID})},
		"inventory/history":    {admin, tenant(map[string]any{"nodeId": nodeID})},
		"inventory/report": {cred, map[string]any{"nodeId": nodeID, "sections": map[string]any{ // each list's item with its required fields
			"disks": []any{map[string]any{"wwn": "wwn-1"}}, "gpus": []any{map[string]any{"uuid": "GPU-1"}}, "nics": []any{map[string]any{"mac": "aa:bb:cc:dd:ee:ff"}}}}},
		"profiles/create":      {member, tenant(map[string]any{"document": profileDoc("other", 1)})},
		"profiles/update":      {member, tenant(map[string]any{"profileId": "base", "profileVersion": 1, "document": profileDoc("base", 1)})},
		"profiles/get":         {member, tenant(map[string]any{"profileId": "base"})},
		"profiles/delete":      {member, tenant(map[string]any{"profileId": "nothing"})},
		"profiles/render":      {member, tenant(map[string]any{"profileId": "base"})},
		"profiles/validate":    {member, tenant(map[string]any{"profileId": "base"})},
		"profiles/list":        {member, tenant(nil)},
		"workflows/create":     {member, tenant(map[string]any{"nodeId": nodeID, "profileId": "base"})},
		"workflows/list":       {member, tenant(nil)},
		"workflows/cancel":     {member, tenant(map[string]any{"workflowId": wf})},
		"workflows/reportStep": {cred, map[string]any{"nodeId": nodeID, "workflowId": wf, "index": 0, "status": "running"}},
		"instances/create":     {member, tenant(map[string]any{"poolId": vps, "name": "bounds", "size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1}})},
		"instances/list":       {member, tenant(nil)},
		"instances/events":     {member, tenant(map[string]any{"instanceId": inst})},
		"instances/start":      {member, tenant(map[string]any{"instanceId": inst})},
		"instances/stop":       {member, tenant(map[string]any{"instanceId": inst})},
		"instances/reboot":     {member, tenant(map[string]any{"instanceId": inst})},
		"instances/delete":     {member, tenant(map[string]any{"instanceId": inst})},
		"instances/assigned":   {cred, map[string]any{"nodeId": nodeID}},
		"reservations/create":  {member, tenant(map[string]any{"poolId": vps, "size": map[string]any{"gpus": 0, "vcpus": 1, "memoryGiB": 1}, "startsAt": start.Format(time.RFC3339), "endsAt": start.Add(time.Hour).Format(time.RFC3339)})},
		"reservations/list":    {member, tenant(nil)},
		"audit/list":           {admin, tenant(nil)},
		"events/list":          {member, tenant(nil)},
		"pools/create": {admin, tenant(map[string]any{"name": "bounds", "site": "fra1", "gpuModel": "H100", "sharingMode": "exclusive",
			"kind": "vps-provider"})},
		"reservations/cancel":   {member, tenant(map[string]any{"reservationId": rsv})},
		"instances/report":      {cred, map[string]any{"nodeId": nodeID, "instanceId": inst, "state": "running"}},
		"joinRequests/approve":  {admin, tenant(nil)},
		"instances/capacity":    {member, tenant(map[string]any{"poolId": vps})},
		"reservations/get":      {member, tenant(map[string]any{"reservationId": rsv})},
		"projects/addMember":    {admin, tenant(nil)},
		"members/grant":         {admin, tenant(nil)},
		"machines/register":     {admin, tenant(nil)},
		"nodes/get":             {admin, tenant(map[string]any{"nodeId": nodeID})},
		"workflows/get":         {member, tenant(map[string]any{"workflowId": wf})},
		"inventory/get":         {admin, tenant(map[string]any{"nodeId": nodeID})},
		"pools/get":             {admin, tenant(map[string]any{"poolId": pool})},
		"joinRequests/get":      {admin, tenant(nil)},
		"tokens/create":         {admin, tenant(nil)},
		"instances/get":         {member, tenant(map[string]any{"instanceId": inst})},
		"tenants/get":           {admin, tenant(nil)},
		"projects/get":          {member, tenant(map[string]any{"projectId": prj})},
		"joinTokens/revoke":     {admin, tenant(nil)},
		"tpmKeys/allow":         {admin, tenant(nil)},
		"profiles/listVersions": {member, tenant(map[string]any{"profileId": "base"})},
	}
	fields := integerFields(t, e)
	if len(fields) < 40 {
		t.Fatalf("only %d integer fields found in the OpenAPI document", len(fields))
	}
	call := func(f integerField, v any) testkit.Resp {
		x, ok := fx[f.method]
		if !ok {
			t.Fatalf("%s has integer field %s and no fixture in this test: add one", f.method, strings.Join(f.path, "."))
		}
		return env(t, e).Call(x.token, f.method, set(x.body, f.path, v))
	}
	// Paths in answers render array items as [0].
	want := func(f integerField) string {
		return strings.ReplaceAll(strings.Join(f.path, "."), ".0", "[0]")
	}
	var atBound []func()
	for _, f := range fields {
		name := f.method + " " + want(f)
		if f.max == nil || f.min == nil {
			// Open content (an inventory report's numbers): no 500 whatever the size.
			for _, v := range []any{json.Number("9223372036854775808"), json.Number("-1"), json.Number("1e300")} {
				if r := call(f, v); r.Status >= 500 {
					t.Errorf("%s = %v: %d %s", name, v, r.Status, r.Raw)
				}
			}
			continue
		}
		// past the bound in exact integers (2^53 + 1 is no float64)
		for _, v := range []string{beside(*f.max, 1), beside(*f.min, -1)} {
			r := call(f, json.Number(v))
			if r.Status != 400 || r.Code() != "INVALID_INPUT" || r.Path() != want(f) {
				t.Errorf("%s = %s (past the bound): %d %s", name, v, r.Status, r.Raw)
			}
		}
		for _, v := range []float64{*f.max, *f.min} {
			f, v := f, v
			atBound = append(atBound, func() {
				r := call(f, json.Number(strconv.FormatFloat(v, 'f', -1, 64)))
				// (another rule may still name the field: a profile's version
				// must stay the same on update)
				if r.Status >= 500 || r.Code() == "INVALID_INPUT" && r.Path() == want(f) && strings.Contains(string(r.Raw), "must be in") {
					t.Errorf("%s = %.0f (the bound): %d %s", name, v, r.Status, r.Raw)
				}
			})
		}
	}
	// At the bound last: those calls may change state (archive a pool).
	for _, run := range atBound {
		run()
	}
	t.Logf("%d integer fields checked", len(fields))
}
