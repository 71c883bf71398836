package registry

// The Markdown of outputs, errors and examples on the method pages, the
// named schemas page (docs/api/schemas.md) and the error table
// (docs/api/errors.md).

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"sort"
	"strings"

	"github.com/bettercompute/computed/internal/errs"
)

// outRow is one row of a method's output table.
type outRow struct {
	name, typ, note string
	always          bool
}

// outputRows flattens an output schema into dotted field names: components
// reflected from Go types are expanded in place, named schemas (documents,
// enums) are linked to schemas.md.
func (r *Registry) outputRows(prefix string, s map[string]any, rows *[]outRow) {
	props, _ := s["properties"].(map[string]any)
	req := map[string]bool{}
	switch v := s["required"].(type) {
	case []string:
		for _, n := range v {
			req[n] = true
		}
	case []any:
		for _, n := range v {
			req[n.(string)] = true
		}
	}
	names := make([]string, 0, len(props))
	for n := range props {
		names = append(names, n)
	}
	// Fields in the order the Go type declares them: required first keeps
	// that order for required fields, then the optional ones by name.
	order := map[string]int{}
	if v, ok := s["required"].([]string); ok {
		for i, n := range v {
			order[n] = i
		}
	}
	sort.SliceStable(names, func(i, j int) bool {
		a, b := names[i], names[j]
		ia, oka := order[a]
		ib, okb := order[b]
		switch {
		case oka && okb:
			return ia < ib
		case oka != okb:
			return oka
		}
		return a < b
	})
	for _, n := range names {
		p, _ := props[n].(map[string]any)
		typ, note, inner := r.describe(p)
		if d, _ := p["description"].(string); d != "" {
			if strings.Contains(strings.ToLower(d), strings.ToLower(note)) {
				note = "" // the description says it already ("keys to values")
			}
			note = strings.TrimSuffix(d, ".") + map[bool]string{true: "; " + note, false: ""}[note != ""]
		}
		*rows = append(*rows, outRow{name: prefix + n, typ: typ, note: note, always: req[n]})
		if inner != nil && strings.Count(prefix, ".") < 4 { // bounded: types may nest themselves
			sub := prefix + n + "."
			if strings.HasPrefix(typ, "array") {
				sub = prefix + n + "[]."
			}
			r.outputRows(sub, inner, rows)
		}
	}
}

// describe names a property's type; inner is the object schema to expand
// under it (nil for leaves).
func (r *Registry) describe(p map[string]any) (typ, note string, inner map[string]any) {
	comps := r.Components()
	nullable := false
	if alts, ok := p["anyOf"].([]any); ok && len(alts) == 2 {
		if n, _ := alts[1].(map[string]any); n["type"] == "null" {
			p, nullable = alts[0].(map[string]any), true
		}
	}
	if t, ok := p["type"].([]any); ok && len(t) == 2 && t[1] == "null" {
		p = copyMap(p)
		p["type"], nullable = t[0], true
	}
	defer func() {
		if nullable {
			typ += " or null"
		}
	}()
	if ref, ok := p["$ref"].(string); ok {
		n := strings.TrimPrefix(ref, RefPrefix)
		c, _ := comps[n].(map[string]any)
		if r.isDefined(n) {
			if enum, ok := c["enum"].([]string); ok {
				return "string", "one of " + strings.Join(enum, ", "), nil
			}
			return "[" + n + "](schemas.md#" + strings.ToLower(n) + ")", "", nil
		}
		return "object", "", c
	}
	switch p["type"] {
	case "array":
		it, _ := p["items"].(map[string]any)
		t, n, in := r.describe(it)
		return "array of " + t, n, in
	case "object":
		if ap, ok := p["additionalProperties"].(map[string]any); ok {
			t, _, _ := r.describe(ap)
			return "object of " + t, "keys to values", nil
		}
		return "object", "", p
	case nil:
		return "any", "", nil
	}
	t := fmt.Sprint(p["type"])
	if f, ok := p["format"].(string); ok {
		t += " (" + f + ")"
	}
	return t, "", nil
}

func (r *Registry) isDefined(n string) bool {
	d := r.outputSchemas().defined
	i := sort.SearchStrings(d, n)
	return i < len(d) && d[i] == n
}

func (r *Registry) outputMarkdown(b *strings.Builder, m *Method) {
	s := r.OutputSchema(m)
	var rows []outRow
	typ, _, inner := r.describe(s)
	if inner == nil {
		fmt.Fprintf(b, "\n### Output\n\n%s\n", typ)
		return
	}
	r.outputRows("", inner, &rows)
	b.WriteString("\n### Output\n\n| Field | Type | Always present | Notes |\n|---|---|---|---|\n")
	for _, row := range rows {
		always := ""
		if row.always {
			always = "yes"
		}
		fmt.Fprintf(b, "| `%s` | %s | %s | %s |\n", row.name, cell(row.typ), always, cell(row.note))
	}
}

func errorsMarkdown(b *strings.Builder, m *Method) {
	var list []string
	for _, c := range m.Errors() {
		list = append(list, fmt.Sprintf("[`%s`](errors.md#%s) %d", c, strings.ToLower(string(c)), c.HTTPStatus()))
	}
	fmt.Fprintf(b, "\n### Errors\n\n%s.\n", strings.Join(list, ", "))
}

func exampleMarkdown(b *strings.Builder, m *Method, examples map[string]Example) {
	ex, ok := examples[m.Key()]
	if !ok {
		b.WriteString("\n### Example\n\nNone recorded: run `make examples`.\n")
		return
	}
	auth := "-H \"Authorization: Bearer $TOKEN\" "
	if m.Credential == JoinToken {
		auth = ""
	}
	fmt.Fprintf(b, "\n### Example\n\nRecorded from the e2e suite (`make examples`).\n\n```sh\ncurl -s -X POST localhost:8080%s %s-d @- <<'EOF'\n%s\nEOF\n```\n\n```json\n%s\n```\n",
		m.Path(), auth, indent(ex.Request), indent(ex.Answer))
}

func indent(raw json.RawMessage) string {
	var buf bytes.Buffer
	if err := json.Indent(&buf, bytes.TrimSpace(raw), "", "  "); err != nil {
		return string(raw)
	}
	return buf.String()
}

// SchemasMarkdown renders docs/api/schemas.md: the schemas that packages
// name (documents kept as JSON, closed sets of strings).
func (r *Registry) SchemasMarkdown() string {
	var b strings.Builder
	b.WriteString("# Named schemas\n\nGenerated from the method registry by `make generate`; do not edit.\n\n")
	b.WriteString("Documents the server keeps as JSON (a profile document, inventory sections, a join request's hardware) and closed sets of strings, as the packages that check them define them. The same schemas are the `components.schemas` of [openapi.json](openapi.json); GraphQL enums carry the same values in upper case with `_` for `-`.\n")
	comps := r.Components()
	// The named schemas, then every component they refer to, at any depth,
	// that has no section yet (InventorySections' CPU, GPU, Disk...: a
	// reader found them only in openapi.json).
	names := slices.Clone(r.outputSchemas().defined)
	seen := map[string]bool{}
	for _, n := range names {
		seen[n] = true
	}
	for i := 0; i < len(names); i++ {
		j, _ := json.Marshal(comps[names[i]])
		var more []string
		for _, m := range componentRef.FindAllSubmatch(j, -1) {
			if n := string(m[1]); !seen[n] && comps[n] != nil {
				seen[n] = true
				more = append(more, n)
			}
		}
		sort.Strings(more)
		names = append(names, more...)
	}
	for _, n := range names {
		c, _ := comps[n].(map[string]any)
		fmt.Fprintf(&b, "\n## %s\n\n", n)
		if d, ok := c["description"].(string); ok {
			fmt.Fprintf(&b, "%s\n\n", d)
		}
		if enum, ok := c["enum"].([]string); ok {
			fmt.Fprintf(&b, "One of `%s`.\n", strings.Join(enum, "`, `"))
			continue
		}
		j, _ := json.MarshalIndent(c, "", "  ")
		fmt.Fprintf(&b, "```json\n%s\n```\n", j)
	}
	return b.String()
}

var componentRef = regexp.MustCompile(`"#/components/schemas/([A-Za-z0-9_.-]+)"`)

// codeTable renders rows of the error table, each code with its anchor.
func codeTable(b *strings.Builder, rows []errs.Info) {
	b.WriteString("| Code | HTTP | When | What a client should do |\n|---|---|---|---|\n")
	for _, row := range rows {
		fmt.Fprintf(b, "| <a id=\"%s\"></a>`%s` | %d | %s | %s |\n", strings.ToLower(string(row.Code)), row.Code, row.Status, cell(row.When), cell(row.Do))
	}
}

// ErrorsMarkdown renders docs/api/errors.md from the errs table.
func ErrorsMarkdown() string {
	var b strings.Builder
	b.WriteString("# Errors\n\nGenerated from the error table (`internal/errs`) by `make generate`; do not edit.\n\n")
	b.WriteString("Every error of the method surface is one JSON shape with the HTTP status of its code:\n\n")
	b.WriteString("```json\n{\"error\": {\"code\": \"NOT_FOUND\", \"message\": \"profile gpu-base version 3 not found\", \"details\": {}}}\n```\n\n")
	b.WriteString("GraphQL puts the same code in `errors[].extensions.code` and the details in `errors[].extensions.details`. Branch on `code`, never on `message` (it is for people and may change). Every answer carries `X-Request-Id`; quote it when reporting a problem. Each method page lists the codes the method can answer.\n\n")
	codeTable(&b, errs.Table())
	b.WriteString("\nThe HTTP layer answers two more codes, for how a request was sent, before any method or operation runs (no method page lists them):\n\n")
	codeTable(&b, errs.Transport())
	b.WriteString("\n## Details\n\n`details` is an object on every error, empty when there is nothing to add. These are the fields it may hold:\n\n")
	b.WriteString("| Field | Type | When |\n|---|---|---|\n")
	for _, d := range errs.Details() {
		t, _ := d.Schema["type"].(string)
		if r, ok := d.Schema["$ref"].(string); ok {
			t = strings.TrimPrefix(r, "#/components/schemas/")
		}
		if t == "array" {
			t = "array of " + strings.TrimPrefix(d.Schema["items"].(map[string]any)["$ref"].(string), "#/components/schemas/")
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s |\n", d.Key, t, cell(d.When))
	}
	b.WriteString("\n`details.reason` says which rule refused where one code covers several:\n\n| Reason | Code | When |\n|---|---|---|\n")
	for _, r := range errs.Reasons() {
		fmt.Fprintf(&b, "| `%s` | [`%s`](#%s) | %s |\n", r.Value, r.Code, strings.ToLower(string(r.Code)), cell(r.When))
	}
	b.WriteString("\nRetrying in general: `UNAVAILABLE` and `RATE_LIMITED` are the codes worth retrying automatically. Reads are safe to retry. A mutation that timed out or answered `UNAVAILABLE` may or may not have been applied: read the resource (or list by name) before creating it again; updates carrying `expectedVersion` are safe to repeat, since a second application is a `CONFLICT`.\n")
	return b.String()
}
