package profiles

import (
	"bytes"
	"encoding/json"
	"fmt"
	"math"
	"sort"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pattern"
	"github.com/bettercompute/computed/internal/pgtext"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/schemaerr"
)

// Bounds of a profile document.
const (
	MaxID       = 128
	MaxVersion  = 1000000
	MaxSteps    = 200
	MaxUserData = 64 << 10  // bytes
	MaxDocument = 128 << 10 // bytes of the document's JSON written compactly, its strings in UTF-8 (documentSize)
)

// SchemaURL names the profile document's JSON Schema.
const SchemaURL = "https://schemas.bettercompute.dev/profile.json"

// devicePath is the pattern of a block device path in a step's with:
// /dev and one or more names, none empty and none starting with a dot, so
// no "." or ".." (a probe's "/dev/../../etc/passwd" passed as a disk to
// wipe); at most 133 characters (deviceLen) in all, as before.
const devicePath = `^/dev(/[A-Za-z0-9_-][A-Za-z0-9_.-]*)+$`

const deviceLen = `133`

// stepNamePattern is a step name's rule: the product's name rule
// (registry.Name: not empty, no leading or trailing space), so "   " or
// " wipe" is no step's name.
var stepNamePattern = registry.Name(false).Pattern

// stepName checks a stored step's name against stepNamePattern with the
// schema's (ECMA-262) semantics: a version stored before the rule held can
// break it.
var stepName = pattern.MustCompile(stepNamePattern)

// documentSchema is the structure of a profile document (defineProfile);
// meaning (steps resolving, their with) is checked by validate and render.
var documentSchema = `{
  "$schema": "https://json-schema.org/draft/2020-12/schema",
  "$id": "` + SchemaURL + `",
  "description": "a provisioning profile: its id and version, and the steps that build a node, by phase",
  "type": "object",
  "required": ["id", "version"],
  "additionalProperties": false,
  "properties": {
    "id": {"type": "string", "maxLength": ` + strconv.Itoa(MaxID) + `, "pattern": ` + strconv.Quote(registry.ProfileIDPattern) + `},
    "version": {"type": "integer", "minimum": 1, "maximum": ` + strconv.Itoa(MaxVersion) + `},
    "name": {"type": "string", "maxLength": 200},
    "description": {"type": "string", "maxLength": 2000},
    "image": {
      "type": "object", "required": ["url", "sha256"], "additionalProperties": false,
      "properties": {
        "url": {"type": "string", "maxLength": 2048, "pattern": "^(https?|oci)://\\S+$"},
        "sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"},
        "format": {"enum": ["raw", "qcow2", "iso", "tar"]}
      }
    },
    "drivers": {
      "type": "array", "maxItems": 32,
      "items": {
        "type": "object", "required": ["name"], "additionalProperties": false,
        "properties": {
          "name": {"type": "string", "maxLength": 64, "pattern": "^[a-z0-9][a-z0-9._-]{0,63}$"},
          "version": {"type": "string", "maxLength": 64}
        }
      }
    },
    "steps": {
      "type": "array", "maxItems": ` + strconv.Itoa(MaxSteps) + `,
      "items": {
        "type": "object", "required": ["use"], "additionalProperties": false,
        "properties": {
          "name": {"type": "string", "minLength": 1, "maxLength": 128, "pattern": ` + strconv.Quote(stepNamePattern) + `},
          "use": {"type": "string", "minLength": 1, "maxLength": 128},
          "with": {"type": "object", "maxProperties": 64, "additionalProperties": true}
        }
      }
    },
    "userData": {"type": "string", "maxLength": ` + strconv.Itoa(MaxUserData) + `,
      "description": "cloud-init user data: at most ` + strconv.Itoa(MaxUserData) + ` bytes of UTF-8, as cloud-init counts it (maxLength, in characters, is the closest bound a JSON Schema states)"},
    "hostConfig": ` + hostConfigSchema + `
  }
}`

// hostConfigSchema: what a daemon writes into a line of a file (the kernel
// command line, sysctl.d, the hostname) holds no line break or other
// control character (C0, C1, U+2028 and U+2029), and a sysctl key no space
// or "=" either (a key or
// value of "1\nkernel.x = y" was a second setting; keys had no length).
const hostConfigSchema = `{
      "type": "object", "additionalProperties": false,
      "properties": {
        "hostname": {"type": "string", "maxLength": 253, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f\u2028\u2029]*$"},
        "kernelArgs": {"type": "array", "maxItems": 64, "items": {"type": "string", "maxLength": 256, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f\u2028\u2029]*$"}},
        "sysctl": {"type": "object", "maxProperties": 256, "additionalProperties": false,
          "description": "kernel parameters by key: a key is 1-256 characters without spaces, \"=\" or control characters",
          "patternProperties": {"^[^\\x00-\\x20=\\x7f-\\x9f\u2028\u2029]{1,256}$": {"type": ["string", "integer"], "maxLength": 256, "pattern": "^[^\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f\u2028\u2029]*$"}}},
        "timezone": {"type": "string", "maxLength": 64, "pattern": "^[^\\x00-\\x1f\\x7f-\\x9f\u2028\u2029]*$"}
      }
    }`

var docSchema = mustCompile(SchemaURL, documentSchema)

// Visibilities of a profile.
const (
	Private = "private"
	Public  = "public"
)

// Names of the profile's schemas for the OpenAPI document and the GraphQL
// enums: the document is the structure checkDocument enforces.
var (
	DocumentSchema   = registry.DefineSchema("ProfileDocument", documentSchema)
	VisibilityEnum   = registry.DefineEnum("ProfileVisibility", "a public profile is visible to every tenant; a private one to its own", Private, Public)
	PhaseEnum        = registry.DefineEnum("StepPhase", "the phases a workflow runs, in order", Phases...)
	IssueCodeEnum    = registry.DefineEnum("ProfileIssueCode", "what validate found", IssueUnknownStep, IssueInvalidWith, IssueEmptyExpansion, IssueDuplicateName, IssuePhaseOrder, IssueNoSteps, IssueInvalidName, IssueInvalidDocument)
	StepParamsSchema = registry.DefineSchema("StepParameters", `{"type": "object", "additionalProperties": true, "description": "a step's with: its parameters, checked against the step's own schema by validate and render"}`)
)

func mustCompile(url, text string) *jsonschema.Schema {
	doc, err := jsonschema.UnmarshalJSON(strings.NewReader(text))
	if err != nil {
		panic(fmt.Sprintf("profiles: schema %s: %v", url, err))
	}
	c := jsonschema.NewCompiler()
	c.UseRegexpEngine(pattern.Engine) // ECMA-262, as the schema says
	if err := c.AddResource(url, doc); err != nil {
		panic(fmt.Sprintf("profiles: schema %s: %v", url, err))
	}
	s, err := c.Compile(url)
	if err != nil {
		panic(fmt.Sprintf("profiles: schema %s: %v", url, err))
	}
	return s
}

// checked is a document that passed the structural check.
type checked struct {
	Raw     []byte
	ID      string
	Version int
}

// checkDocument checks a document's structure; any problem is INVALID_INPUT
// naming the first offending field (document.steps[2].use).
func checkDocument(raw []byte) (*checked, error) {
	if len(bytes.TrimSpace(raw)) == 0 {
		return nil, errs.Invalid("document", "document is required")
	}
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, errs.Invalid("document", "document is not valid JSON")
	}
	m, ok := v.(map[string]any)
	if !ok {
		return nil, errs.Invalid("document", "document must be an object")
	}
	// Every list of profiles (and of workflows, which keep their
	// profile's document) loads whole rows: a page of 200 documents of
	// about 1 MiB each, as the body limit allowed, was 200 MB of memory
	// for one call, and a query of a few such pages ~100 MB of answer.
	if n := documentSize(v); n > MaxDocument {
		return nil, errs.Invalid("document", "document is %d bytes of JSON, more than the %d allowed", n, MaxDocument)
	}
	if p := pgtext.FirstNUL("document", v); p != "" {
		return nil, errs.Invalid(p, "%s must not contain NUL characters", p)
	}
	if err := docSchema.Validate(v); err != nil {
		path, msg := firstProblem("document", v, err)
		return nil, errs.Invalid(path, "%s: %s", path, msg)
	}
	if ud, ok := m["userData"].(string); ok && len(ud) > MaxUserData {
		return nil, errs.Invalid("document.userData", "document.userData is larger than %d bytes", MaxUserData)
	}
	ver, _ := toInt(m["version"])
	return &checked{Raw: raw, ID: m["id"].(string), Version: ver}, nil
}

// documentSize is the size of a decoded document written compactly with
// its strings in UTF-8: one value has one size however a client spelled
// it. (Measured on the bytes sent, "é" sent as \u00e9 counted 6 bytes
// and sent raw 2, so Python's json.dumps, which escapes by default, was
// refused a document another client's identical one was not.)
func documentSize(v any) int {
	var n byteCount
	enc := json.NewEncoder(&n)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return math.MaxInt // not a JSON value: refused before this
	}
	// encoding/json writes U+2028 and U+2029 as six-byte escapes whatever
	// it is told (for JavaScript's sake); in UTF-8 each is three bytes.
	return int(n) - 1 - 3*separators(v) // Encode's newline
}

// separators counts U+2028 and U+2029 in v's strings and keys.
func separators(v any) int {
	n := 0
	switch v := v.(type) {
	case string:
		n = strings.Count(v, "\u2028") + strings.Count(v, "\u2029")
	case map[string]any:
		for k, x := range v {
			n += separators(k) + separators(x)
		}
	case []any:
		for _, x := range v {
			n += separators(x)
		}
	}
	return n
}

type byteCount int

func (c *byteCount) Write(p []byte) (int, error) { *c += byteCount(len(p)); return len(p), nil }

func toInt(v any) (int, bool) {
	n, ok := v.(json.Number)
	if !ok {
		return 0, false
	}
	f, err := n.Float64()
	if err != nil || f != math.Trunc(f) {
		return 0, false
	}
	return int(f), true
}

// fieldOrder is the order fields are reported in: the document's own order.
var fieldOrder = func() map[string]int {
	m := map[string]int{}
	for i, k := range []string{"id", "version", "name", "description", "image", "url", "sha256", "format",
		"drivers", "steps", "use", "with", "userData", "hostConfig", "hostname", "kernelArgs", "sysctl", "timezone"} {
		m[k] = i + 1
	}
	return m
}()

func keyLess(a, b string) bool {
	ra, rb := fieldOrder[a], fieldOrder[b]
	if ra == 0 {
		ra = len(fieldOrder) + 1
	}
	if rb == 0 {
		rb = len(fieldOrder) + 1
	}
	if ra != rb {
		return ra < rb
	}
	return a < b
}

// problem is one leaf validation error: where and what.
type problem struct {
	loc []string
	msg string
}

// firstProblem flattens a validation error and returns the first offending
// location in document order, rendered under base.
func firstProblem(base string, doc any, err error) (string, string) {
	verr, ok := err.(*jsonschema.ValidationError)
	if !ok {
		return base, err.Error()
	}
	var leaves []problem
	var walk func(e *jsonschema.ValidationError)
	walk = func(e *jsonschema.ValidationError) {
		if len(e.Causes) > 0 {
			for _, c := range e.Causes {
				walk(c)
			}
			return
		}
		loc := append([]string{}, e.InstanceLocation...)
		msg := e.Error()
		switch k := e.ErrorKind.(type) {
		case *kind.Required:
			missing := append([]string{}, k.Missing...)
			sort.Slice(missing, func(i, j int) bool { return keyLess(missing[i], missing[j]) })
			loc = append(loc, missing[0])
			msg = "is required"
		case *kind.AdditionalProperties:
			props := append([]string{}, k.Properties...)
			sort.Strings(props)
			loc = append(loc, props[0])
			msg = "unknown field"
			if strings.HasSuffix(e.SchemaURL, "/sysctl") {
				msg = "is not a sysctl key: 1-256 characters without spaces, \"=\" or control characters"
			}
		default:
			msg = schemaerr.Leaf(e)
		}
		leaves = append(leaves, problem{loc: loc, msg: msg})
	}
	walk(verr)
	if len(leaves) == 0 {
		return base, verr.Error()
	}
	sort.SliceStable(leaves, func(i, j int) bool { return locLess(leaves[i].loc, leaves[j].loc) })
	return render(base, doc, leaves[0].loc), leaves[0].msg
}

func locLess(a, b []string) bool {
	for i := 0; i < len(a) && i < len(b); i++ {
		if a[i] == b[i] {
			continue
		}
		ai, aerr := strconv.Atoi(a[i])
		bi, berr := strconv.Atoi(b[i])
		if aerr == nil && berr == nil {
			return ai < bi
		}
		return keyLess(a[i], b[i])
	}
	return len(a) < len(b)
}

// render writes a location as document.steps[2].use, walking doc to tell
// array indexes from object keys.
func render(base string, doc any, loc []string) string {
	var b strings.Builder
	b.WriteString(base)
	cur := doc
	for _, seg := range loc {
		switch t := cur.(type) {
		case []any:
			b.WriteString("[" + seg + "]")
			if i, err := strconv.Atoi(seg); err == nil && i >= 0 && i < len(t) {
				cur = t[i]
			} else {
				cur = nil
			}
		case map[string]any:
			b.WriteString("." + seg)
			cur = t[seg]
		default:
			b.WriteString("." + seg)
			cur = nil
		}
	}
	return b.String()
}
