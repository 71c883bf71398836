package pools

import (
	"encoding/json"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/schemaerr"
)

// policySchema is what a pool's policy may say: the keys the server reads
// are typed (a create or update whose known key has the wrong type or range
// is INVALID_INPUT, first offending field), any other key is kept as given
// for tools of the owner's own. The same text is the OpenAPI document's
// PoolPolicy, so a generated client types what the server checks.
//
// Where each key is read: sim by the sim provider
// (internal/instances/provider/sim.ParseConfig); capacity by the provider
// pools' capacity (internal/instances/capacity.go providerTotal) and the
// sim; timeouts, maxTries and timeSlices by the reconciler and placement
// (internal/instances/reconciler.go Policy).
const policySchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "https://computed.invalid/schemas/pool-policy.json",
  "type": "object",
  "description": "the pool's policy ({} when none was given). The keys below are the ones the server reads and checks; any other key is kept as given (strings hold no NUL characters)",
  "additionalProperties": true,
  "properties": {
    "sim": {
      "type": "object", "additionalProperties": false,
      "description": "the simulated cloud's behaviour, for vps-provider pools whose provider is sim",
      "properties": {
        "latencyMs": {
          "description": "how long the simulated cloud takes per operation, in milliseconds: one number for every operation, or one per operation (0 for those left out)",
          "anyOf": [
            {"type": "integer", "minimum": 0, "maximum": 86400000},
            {"type": "object", "additionalProperties": false, "properties": {
              "create": {"type": "integer", "minimum": 0, "maximum": 86400000},
              "start": {"type": "integer", "minimum": 0, "maximum": 86400000},
              "stop": {"type": "integer", "minimum": 0, "maximum": 86400000},
              "reboot": {"type": "integer", "minimum": 0, "maximum": 86400000},
              "delete": {"type": "integer", "minimum": 0, "maximum": 86400000}}}
          ]
        },
        "failureRate": {"type": "number", "minimum": 0, "maximum": 1, "description": "the share of provider calls that fail with a transient error"}
      }
    },
    "capacity": {
      "type": "object", "additionalProperties": false,
      "description": "a vps-provider pool's bounds (0 or absent: unbounded); instances bounds the sim's VMs",
      "properties": {
        "gpus": {"type": "integer", "minimum": 0, "maximum": 2147483647},
        "vcpus": {"type": "integer", "minimum": 0, "maximum": 2147483647},
        "memoryGiB": {"type": "integer", "minimum": 0, "maximum": 2147483647},
        "instances": {"type": "integer", "minimum": 0, "maximum": 2147483647}
      }
    },
    "timeouts": {
      "type": "object", "additionalProperties": false,
      "description": "seconds an instance may stay in a transitional state before it fails (defaults: provisioning 600, stopping 300, rebooting 300, deleting 600)",
      "properties": {
        "provisioning": {"type": "integer", "minimum": 1, "maximum": 2592000},
        "stopping": {"type": "integer", "minimum": 1, "maximum": 2592000},
        "rebooting": {"type": "integer", "minimum": 1, "maximum": 2592000},
        "deleting": {"type": "integer", "minimum": 1, "maximum": 2592000}
      }
    },
    "maxTries": {"type": "integer", "minimum": 1, "maximum": 1000, "description": "tries of one provider step before the instance fails (default 5)"},
    "timeSlices": {"type": "integer", "minimum": 1, "maximum": 1024, "description": "slices per GPU of a time-sliced pool (default 4)"}
  }
}`

var compiledPolicy = func() *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(policySchema))
	if err != nil {
		panic("pools: policy schema: " + err.Error())
	}
	c := jsonschema.NewCompiler()
	const url = "https://computed.invalid/schemas/pool-policy.json"
	if err := c.AddResource(url, doc); err != nil {
		panic("pools: policy schema: " + err.Error())
	}
	return c.MustCompile(url)
}()

// checkPolicy validates a decoded policy against policySchema: nil, or
// INVALID_INPUT naming the first offending field under path.
func checkPolicy(path string, raw json.RawMessage) error {
	v, err := jsonschema.UnmarshalJSON(strings.NewReader(string(raw)))
	if err != nil {
		return errs.Invalid(path, "%s must be an object", path)
	}
	err = compiledPolicy.Validate(v)
	if err == nil {
		return nil
	}
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return errs.Invalid(path, "%s is not a valid policy", path)
	}
	// The first leaf by location (an anyOf reports each alternative: the
	// deepest location names the field best).
	type leaf struct {
		loc []string
		msg string
	}
	var leaves []leaf
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) == 0 {
			l := leaf{loc: e.InstanceLocation, msg: schemaerr.Leaf(e)}
			if k, ok := e.ErrorKind.(*kind.AdditionalProperties); ok && len(k.Properties) > 0 {
				props := append([]string{}, k.Properties...)
				sort.Strings(props)
				l.loc, l.msg = append(append([]string{}, l.loc...), props[0]), "unknown field"
			}
			leaves = append(leaves, l)
			return
		}
		for _, c := range e.Causes {
			walk(c)
		}
	}
	walk(verr)
	// By location, a deeper one first where one holds the other (an anyOf's
	// alternatives: the one that got further names the field).
	sort.SliceStable(leaves, func(i, j int) bool {
		a, b := leaves[i].loc, leaves[j].loc
		for k := 0; k < len(a) && k < len(b); k++ {
			if a[k] != b[k] {
				return a[k] < b[k]
			}
		}
		return len(a) > len(b)
	})
	l := leaf{msg: verr.Error()}
	if len(leaves) > 0 {
		l = leaves[0]
	}
	p := path
	for _, k := range l.loc {
		if _, err := strconv.Atoi(k); err == nil {
			p += "[" + k + "]"
		} else {
			p += "." + k
		}
	}
	return errs.Invalid(p, "%s: %s", p, l.msg)
}

// PolicySchema names the policy's schema in the OpenAPI document.
var PolicySchema = registry.DefineSchema("PoolPolicy", policySchema)
