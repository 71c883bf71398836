package inventory_test

import (
	"encoding/json"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bettercompute/computed/internal/app"
	"github.com/bettercompute/computed/internal/inventory"
)

// The OpenAPI document's InventorySections takes what the report's parser
// takes and refuses what it refuses, at each bound and past it: the
// document stated no bound (a 4,000-character driver version, 900 drivers,
// a 210-character WWN and an unknown field of memory were valid by it, and
// refused).
func TestTheSectionsSchemaStatesTheParsersBounds(t *testing.T) {
	comps := app.Registry(nil, nil, nil, nil).Components()
	doc, _ := json.Marshal(map[string]any{"$ref": "#/$defs/InventorySections", "$defs": comps})
	text := strings.ReplaceAll(string(doc), "#/components/schemas/", "#/$defs/")
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		t.Fatal(err)
	}
	c := jsonschema.NewCompiler()
	if err := c.AddResource("sections.json", v); err != nil {
		t.Fatal(err)
	}
	schema, err := c.Compile("sections.json")
	if err != nil {
		t.Fatal(err)
	}
	raw, err := os.ReadFile("testdata/h100-node.json")
	if err != nil {
		t.Fatal(err)
	}
	var base map[string]any
	if err := json.Unmarshal(raw, &base); err != nil {
		t.Fatal(err)
	}
	drivers := func(n, valueLen int) map[string]any {
		m := map[string]any{}
		for i := 0; i < n; i++ {
			m[fmt.Sprintf("d%03d", i)] = strings.Repeat("v", valueLen)
		}
		return m
	}
	disk := func(wwn string) []any { return []any{map[string]any{"wwn": wwn}} }
	for _, c := range []struct {
		name    string
		section string
		value   any
		ok      bool
	}{
		{"the fixture", "", nil, true},
		{"64 drivers of 256 characters", "drivers", drivers(64, 256), true},
		{"a driver of 257 characters", "drivers", drivers(1, 257), false},
		{"65 drivers", "drivers", drivers(65, 1), false},
		{"a driver key of 65 characters", "drivers", map[string]any{strings.Repeat("k", 65): "1"}, false},
		{"a driver key with a space", "drivers", map[string]any{"a b": "1"}, false},
		{"a WWN of 128 characters", "disks", disk(strings.Repeat("w", 128)), true},
		{"a WWN of 129 characters", "disks", disk(strings.Repeat("w", 129)), false},
		{"an unknown field of memory", "memory", map[string]any{"totalMiB": 1}, false},
		{"an unknown section", "bogus", map[string]any{}, false},
		{"a GPU index of 255", "gpus", []any{map[string]any{"uuid": "GPU-1", "index": 255}}, true},
		{"a GPU index of 256", "gpus", []any{map[string]any{"uuid": "GPU-1", "index": 256}}, false},
		{"a GPU index below zero", "gpus", []any{map[string]any{"uuid": "GPU-1", "index": -1}}, false},
		{"a MIG mode of another word", "gpus", []any{map[string]any{"uuid": "GPU-1", "migMode": "on"}}, false},
		{"a MAC of another form", "nics", []any{map[string]any{"mac": "aa-bb-cc-dd-ee-ff"}}, false},
		{"an OS name of 257 characters", "os", map[string]any{"name": strings.Repeat("n", 257)}, false},
		{"an OS name of 256 characters", "os", map[string]any{"name": strings.Repeat("n", 256)}, true},
		{"a NUL in a driver version", "drivers", map[string]any{"nvidia": "a\x00b"}, false},
		{"a NUL in an OS name", "os", map[string]any{"name": "a\x00b"}, false},
		{"an empty MIG profile", "gpus", []any{map[string]any{"uuid": "GPU-1", "migDevices": []any{map[string]any{"uuid": "MIG-1", "profile": ""}}}}, false},
		{"a MIG profile", "gpus", []any{map[string]any{"uuid": "GPU-1", "migDevices": []any{map[string]any{"uuid": "MIG-1", "profile": "1g.10gb"}}}}, true},
	} {
		t.Run(c.name, func(t *testing.T) {
			m := map[string]any{}
			for k, v := range base {
				m[k] = v
			}
			if c.section != "" {
				m[c.section] = c.value
			}
			b, _ := json.Marshal(m)
			inst, _ := jsonschema.UnmarshalJSON(strings.NewReader(string(b)))
			byDoc := schema.Validate(inst) == nil
			_, _, _, derr := inventory.Decode(b)
			if byDoc != c.ok || (derr == nil) != c.ok {
				t.Errorf("valid by the document %v, taken by the parser %v (%v); want %v", byDoc, derr == nil, derr, c.ok)
			}
		})
	}
}
