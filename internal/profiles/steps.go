package profiles

import (
	"bytes"
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"sort"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bettercompute/computed/internal/errs"
)

// Phases in the order a workflow runs them.
const (
	PhasePrepare   = "prepare"
	PhaseInstall   = "install"
	PhaseConfigure = "configure"
	PhaseFinalize  = "finalize"
)

// Phases in the order a workflow runs them.
var Phases = []string{PhasePrepare, PhaseInstall, PhaseConfigure, PhaseFinalize}

func phaseRank(p string) int {
	for i, x := range Phases {
		if x == p {
			return i
		}
	}
	return len(Phases)
}

// StepDef is one registered step: its phase, the JSON Schema its with must
// pass, and for composite steps how it expands.
type StepDef struct {
	Name      string
	Module    string
	Phase     string // of a simple step; composite steps take their children's phases
	Composite bool
	Schema    string // JSON Schema of with
	// Expand turns one use of the step into the steps a workflow runs; nil
	// means the step runs itself with its with (after fill).
	Expand func(d *docView, with map[string]any) []child
	// Fill completes with from the document (image.write takes the image).
	Fill func(d *docView, with map[string]any) map[string]any
	// Source is the document field Fill reads (document.image); a field
	// missing from both with and the document is reported there.
	Source string
	// MaxBytes bounds string fields of with in bytes of UTF-8, which a
	// schema's maxLength (characters) does not.
	MaxBytes map[string]int

	schema *jsonschema.Schema
}

type child struct {
	Suffix string // appended to the parent's name
	Use    string
	With   map[string]any
}

// docView is the part of a document expansion reads.
type docView struct {
	Image *struct {
		URL    string `json:"url"`
		SHA256 string `json:"sha256"`
		Format string `json:"format"`
	} `json:"image"`
	Drivers []struct {
		Name    string `json:"name"`
		Version string `json:"version"`
	} `json:"drivers"`
	Steps []struct {
		Name string         `json:"name"`
		Use  string         `json:"use"`
		With map[string]any `json:"with"`
	} `json:"steps"`
	UserData   *string        `json:"userData"`
	HostConfig map[string]any `json:"hostConfig"`
}

const deviceSchema = `{"type": "string", "maxLength": ` + deviceLen + `, "pattern": "` + devicePath + `"}`
const devicesSchema = `{"type": "array", "minItems": 1, "maxItems": 64, "items": ` + deviceSchema + `}`

// steps is the step registry, by name.
var steps = map[string]*StepDef{}

func register(s *StepDef) {
	if s.Module == "" {
		s.Module = "provision"
	}
	s.schema = mustCompile("https://schemas.bettercompute.dev/steps/"+s.Name+".json", s.Schema)
	steps[s.Name] = s
}

// Step returns a registered step.
func Step(name string) (*StepDef, bool) { s, ok := steps[name]; return s, ok }

// StepNames lists the registered steps.
func StepNames() []string {
	out := make([]string, 0, len(steps))
	for k := range steps {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func copyWith(w map[string]any) map[string]any {
	out := make(map[string]any, len(w)+4)
	for k, v := range w {
		out[k] = v
	}
	return out
}

func fillImage(d *docView, w map[string]any) map[string]any {
	out := copyWith(w)
	if d.Image != nil {
		if _, ok := out["url"]; !ok {
			out["url"] = d.Image.URL
		}
		if _, ok := out["sha256"]; !ok {
			out["sha256"] = d.Image.SHA256
		}
		if _, ok := out["format"]; !ok && d.Image.Format != "" {
			out["format"] = d.Image.Format
		}
	}
	// The written image is checked against sha256: verify is true unless
	// with says otherwise, which the schema then refuses (it was set to
	// true over a with's false, silently).
	if _, ok := out["verify"]; !ok {
		out["verify"] = true
	}
	return out
}

func init() {
	register(&StepDef{Name: "disk.wipe", Phase: "prepare", Schema: `{"type": "object", "required": ["devices"], "additionalProperties": false,
		"properties": {"devices": ` + devicesSchema + `, "method": {"enum": ["quick", "discard", "zero"]}}}`})
	register(&StepDef{Name: "disk.partition", Phase: "prepare", Schema: `{"type": "object", "additionalProperties": false,
		"properties": {"device": ` + deviceSchema + `, "layout": {"enum": ["single", "lvm"]}, "efi": {"type": "boolean"}}}`})
	register(&StepDef{Name: "image.write", Phase: "install", Fill: fillImage, Source: "document.image", Schema: `{"type": "object", "required": ["url", "sha256"], "additionalProperties": false,
		"properties": {"url": {"type": "string", "minLength": 1, "maxLength": 2048, "pattern": "^(https?|oci)://\\S+$"},
		"sha256": {"type": "string", "pattern": "^[0-9a-f]{64}$"}, "format": {"enum": ["raw", "qcow2", "iso", "tar"]},
		"device": ` + deviceSchema + `, "verify": {"const": true}}}`})
	register(&StepDef{Name: "bootloader.install", Phase: "install", Schema: `{"type": "object", "additionalProperties": false,
		"properties": {"device": ` + deviceSchema + `, "bootloader": {"enum": ["grub", "systemd-boot"]}}}`})
	register(&StepDef{Name: "os.install", Composite: true, Schema: `{"type": "object", "additionalProperties": false,
		"properties": {"device": ` + deviceSchema + `, "layout": {"enum": ["single", "lvm"]}}}`,
		Expand: func(d *docView, w map[string]any) []child {
			part, img, boot := map[string]any{}, map[string]any{}, map[string]any{}
			if dev, ok := w["device"]; ok {
				part["device"], img["device"], boot["device"] = dev, dev, dev
			}
			if l, ok := w["layout"]; ok {
				part["layout"] = l
			}
			return []child{{"disk.partition", "disk.partition", part}, {"image.write", "image.write", img}, {"bootloader.install", "bootloader.install", boot}}
		}})
	register(&StepDef{Name: "drivers.install", Phase: "configure", Composite: true, Schema: `{"type": "object", "additionalProperties": false, "properties": {}}`,
		Expand: func(d *docView, _ map[string]any) []child {
			var out []child
			for _, drv := range d.Drivers {
				out = append(out, child{drv.Name, "drivers.install", map[string]any{"name": drv.Name, "version": drv.Version}})
			}
			return out
		}})
	register(&StepDef{Name: "cloud-init.write", Phase: "configure", Source: "document.userData", MaxBytes: map[string]int{"userData": 65536}, Schema: `{"type": "object", "required": ["userData"], "additionalProperties": false,
		"properties": {"userData": {"type": "string", "minLength": 1, "maxLength": 65536}}}`,
		Fill: func(d *docView, w map[string]any) map[string]any {
			out := copyWith(w)
			if _, ok := out["userData"]; !ok && d.UserData != nil {
				out["userData"] = *d.UserData
			}
			return out
		}})
	register(&StepDef{Name: "network.configure", Phase: "configure", Schema: `{"type": "object", "additionalProperties": false,
		"properties": {"dhcp": {"type": "boolean"}, "mtu": {"type": "integer", "minimum": 576, "maximum": 9216},
		"interfaces": {"type": "array", "maxItems": 32, "items": {"type": "string", "pattern": "^[A-Za-z0-9._-]{1,15}$"}}}}`})
	register(&StepDef{Name: "host.configure", Phase: "configure", Schema: hostConfigSchema,
		Fill: func(d *docView, w map[string]any) map[string]any {
			out := copyWith(d.HostConfig)
			for k, v := range w {
				out[k] = v
			}
			return out
		}})
	register(&StepDef{Name: "mig.configure", Phase: "configure", Schema: `{"type": "object", "required": ["profile"], "additionalProperties": false,
		"properties": {"profile": {"type": "string", "pattern": "^[0-9]{1,2}g\\.[0-9]{1,3}gb$"}, "count": {"type": "integer", "minimum": 1, "maximum": 7},
		"gpus": {"type": "array", "maxItems": 16, "items": {"type": "integer", "minimum": 0, "maximum": 15}}}}`})
	register(&StepDef{Name: "bmc.power", Phase: "finalize", Schema: `{"type": "object", "required": ["action"], "additionalProperties": false,
		"properties": {"action": {"enum": ["on", "off", "cycle", "reset"]}}}`})
}

// Issue is one problem validate finds in a profile.
type Issue struct {
	Path    string `json:"path" doc:"Where in the document (document.steps[2].use)."`
	Code    string `json:"code" schema:"ProfileIssueCode" doc:"Which kind of problem."`
	Message string `json:"message" doc:"The problem in words."`
}

// Issue codes.
const (
	IssueUnknownStep    = "UNKNOWN_STEP"
	IssueInvalidWith    = "INVALID_WITH"
	IssueEmptyExpansion = "EMPTY_EXPANSION"
	IssueDuplicateName  = "DUPLICATE_NAME"
	IssuePhaseOrder     = "PHASE_ORDER"
	IssueNoSteps        = "NO_STEPS"
	// A stored step name that breaks the name rule (a version stored
	// before the rule held), and a stored document that does not decode.
	IssueInvalidName     = "INVALID_NAME"
	IssueInvalidDocument = "INVALID_DOCUMENT"
)

// Rendered is one expanded step a workflow runs.
type Rendered struct {
	Index int            `json:"index" doc:"The step's position among the expanded steps, from 0."`
	Name  string         `json:"name" doc:"The step's name: the document step's (its use when it has none), or name/suffix for a step a composite expands to."`
	Use   string         `json:"use" doc:"The registered step it runs."`
	Phase string         `json:"phase" schema:"StepPhase" doc:"The phase it runs in; phases run prepare, install, configure, finalize, in that order."`
	With  map[string]any `json:"with" schema:"StepParameters" doc:"The step's parameters ({} when none)."`
}

// Expand resolves a stored document against the step registry: the steps a
// workflow would run and every issue found. An issue's path holds the
// document's keys (a step's with is the client's): it is cut as an
// error's path is, and its message with it (a 125 KB sysctl key came back
// whole in validate, render and workflows.create).
func Expand(raw []byte) ([]Rendered, []Issue) {
	out, issues := expand(raw)
	for i := range issues {
		issues[i].Message = errs.CutMessage(issues[i].Message, issues[i].Path)
		issues[i].Path = errs.CutPath(issues[i].Path)
	}
	return out, issues
}

func expand(raw []byte) ([]Rendered, []Issue) {
	var d docView
	dec := json.NewDecoder(bytes.NewReader(raw))
	dec.UseNumber()
	if err := dec.Decode(&d); err != nil {
		return nil, []Issue{{Path: "document", Code: IssueInvalidDocument, Message: "the stored document does not decode: " + err.Error()}}
	}
	var out []Rendered
	issues := []Issue{}
	if len(d.Steps) == 0 {
		issues = append(issues, Issue{Path: "document.steps", Code: IssueNoSteps, Message: "the profile has no steps"})
	}
	// seen holds every name taken so far, the document steps' own and the
	// names of the steps they expand to, with the document step taking it.
	seen := map[string]int{}
	maxPhase, maxPhaseName := 0, ""
	for i, s := range d.Steps {
		base := fmt.Sprintf("document.steps[%d]", i)
		name := s.Name
		if name == "" {
			name = s.Use
		} else if !stepName.MatchString(name) {
			// Only a version stored before the rule held gets here.
			issues = append(issues, Issue{Path: base + ".name", Code: IssueInvalidName,
				Message: fmt.Sprintf("step name %q must match %s (not empty, no leading or trailing space); rename the step", name, stepNamePattern)})
		}
		if j, dup := seen[name]; dup {
			issues = append(issues, Issue{Path: base + ".name", Code: IssueDuplicateName,
				Message: fmt.Sprintf("step name %q is also the name of document.steps[%d] or a step it expands to; give each step a unique name", name, j)})
		} else {
			seen[name] = i
		}
		def, ok := steps[s.Use]
		if !ok {
			issues = append(issues, Issue{Path: base + ".use", Code: IssueUnknownStep,
				Message: fmt.Sprintf("no registered step is named %q", s.Use)})
			continue
		}
		with := s.With
		if with == nil {
			with = map[string]any{}
		}
		// Steps filled from the document are checked once filled.
		if def.Fill == nil {
			if iss := checkWith(def, base+".with", with); iss != nil {
				issues = append(issues, *iss)
				continue
			}
		}
		var kids []child
		if def.Expand != nil {
			kids = def.Expand(&d, with)
			if len(kids) == 0 {
				issues = append(issues, Issue{Path: base + ".use", Code: IssueEmptyExpansion,
					Message: fmt.Sprintf("%s expands to no steps (for drivers.install: the document lists no drivers)", s.Use)})
				continue
			}
		} else {
			kids = []child{{"", s.Use, with}}
		}
		batch, iss := renderChildren(&d, s.Use, name, base, kids)
		if iss != nil {
			issues = append(issues, *iss)
			continue
		}
		// The steps it expands to are named name/suffix: each must be
		// free too (a document step may already be called
		// os.install/disk.partition, or two drivers share a name).
		for _, r := range batch {
			if r.Name == name {
				continue
			}
			if j, dup := seen[r.Name]; dup {
				issues = append(issues, Issue{Path: base + ".name", Code: IssueDuplicateName,
					Message: fmt.Sprintf("%s expands to a step named %q, which is also the name of document.steps[%d] or a step it expands to; give each step a unique name", s.Use, r.Name, j)})
				break
			}
			seen[r.Name] = i
		}
		for _, r := range batch {
			rank := phaseRank(r.Phase)
			if rank < maxPhase {
				issues = append(issues, Issue{Path: base, Code: IssuePhaseOrder,
					Message: fmt.Sprintf("%s runs in phase %s after a step of phase %s (%s); phases run %v in order", r.Name, r.Phase, Phases[maxPhase], maxPhaseName, Phases)})
				break
			}
			maxPhase, maxPhaseName = rank, r.Name
		}
		out = append(out, batch...)
	}
	for i := range out {
		out[i].Index = i
	}
	if out == nil {
		out = []Rendered{}
	}
	return out, issues
}

// renderChildren renders the steps a document step (use, named name, at
// path base) expands to, each filled from the document where its
// definition says so and checked once filled; the first issue ends it.
func renderChildren(d *docView, use, name, base string, kids []child) ([]Rendered, *Issue) {
	var batch []Rendered
	for _, k := range kids {
		kd := steps[k.Use]
		w := k.With
		if kd.Fill != nil {
			w = kd.Fill(d, w)
		}
		if k.Use != use || kd.Fill != nil {
			if iss := checkWith(kd, base+".with", w); iss != nil {
				if kd.Source != "" && fromDocument(iss.Path, base+".with", k.With) {
					iss.Path = kd.Source
					iss.Message += fmt.Sprintf(" (%s takes it from %s when with does not give it)", k.Use, kd.Source)
				}
				if k.Use != use {
					iss.Message = use + " expands to " + iss.Message
				}
				return nil, iss
			}
		}
		n := name
		if k.Suffix != "" {
			n = name + "/" + k.Suffix
		}
		batch = append(batch, Rendered{Name: n, Use: k.Use, Phase: kd.Phase, With: w})
	}
	return batch, nil
}

// checkWith validates with against the step's schema; nil when it passes.
func checkWith(def *StepDef, base string, with map[string]any) *Issue {
	// Round-trip through the schema library's own decoding so numbers are
	// compared exactly.
	b, _ := json.Marshal(with)
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(b))
	if err != nil {
		return &Issue{Path: base, Code: IssueInvalidWith, Message: err.Error()}
	}
	if err := def.schema.Validate(v); err != nil {
		p, msg := firstProblem(base, v, err)
		return &Issue{Path: p, Code: IssueInvalidWith, Message: fmt.Sprintf("%s rejects this with: %s", def.Name, msg)}
	}
	for _, k := range slices.Sorted(maps.Keys(def.MaxBytes)) {
		if s, ok := with[k].(string); ok && len(s) > def.MaxBytes[k] {
			// The document's userData has the same bound in bytes; the
			// step's with had it in characters (80,000 bytes of "é" passed).
			return &Issue{Path: base + "." + k, Code: IssueInvalidWith,
				Message: fmt.Sprintf("%s rejects this with: %s is longer than %d bytes of UTF-8", def.Name, k, def.MaxBytes[k])}
		}
	}
	return nil
}

// fromDocument reports whether an issue at path (under base) is about a
// field with did not give, so Fill took (or failed to take) it from the
// document.
func fromDocument(path, base string, with map[string]any) bool {
	rest, ok := strings.CutPrefix(path, base+".")
	if !ok {
		return false
	}
	key, _, _ := strings.Cut(rest, ".")
	key, _, _ = strings.Cut(key, "[")
	_, given := with[key]
	return !given
}
