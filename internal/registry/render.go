package registry

import (
	"encoding/json"
	"fmt"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
)

// InputSchema is a method's input as a JSON Schema object (refs into the
// OpenAPI document's components).
func (m *Method) InputSchema() map[string]any {
	return Field{Type: Object, Fields: m.Input}.JSONSchema()
}

// IndexEntry is one row of GET /api/compute.
type IndexEntry struct {
	Group         string         `json:"group"`
	Method        string         `json:"method"`
	Path          string         `json:"path"`
	Summary       string         `json:"summary"`
	Kind          Kind           `json:"kind"`
	Authorization string         `json:"authorization"`
	Permission    string         `json:"permission,omitempty"`
	Resource      string         `json:"resource,omitempty"`
	Items         bool           `json:"items"`
	Credential    Credential     `json:"credential"`
	Module        string         `json:"module"`
	Phase         string         `json:"phase"`
	Status        string         `json:"status"`
	InputSchema   map[string]any `json:"inputSchema"`
	OutputSchema  map[string]any `json:"outputSchema"`
	Errors        []errs.Code    `json:"errors"`
}

// Index lists every method for GET /api/compute. Its schemas stand alone:
// the named schemas they use are under each one's $defs.
func (r *Registry) Index() map[string]any {
	list := make([]IndexEntry, 0, len(r.order))
	comps := r.Components()
	for _, m := range r.order {
		list = append(list, IndexEntry{Group: m.Group, Method: m.Name, Path: m.Path(), Summary: m.Summary,
			Kind: m.Kind, Authorization: m.Authorization(), Permission: string(m.Permission), Resource: m.Resource,
			Items: m.Items, Credential: m.Credential, Module: m.Module, Phase: m.Phase, Status: m.Status,
			InputSchema: selfContained(m.InputSchema(), comps), OutputSchema: selfContained(r.OutputSchema(m), comps),
			Errors: m.Errors()})
	}
	return map[string]any{"methods": list}
}

// DefaultMaxBody is the request body limit of a method that sets none
// (Method.MaxBody).
const DefaultMaxBody = 1 << 20

// BodyLimit is the most bytes a call's body may hold.
func (m *Method) BodyLimit() int64 {
	if m.MaxBody > 0 {
		return m.MaxBody
	}
	return DefaultMaxBody
}

// bodyLimitText is BodyLimit in words: "64 KiB", "1 MiB".
func (m *Method) bodyLimitText() string {
	n := m.BodyLimit()
	switch {
	case n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d bytes", n)
}

// codeMention finds error codes named in a method's notes.
var codeMention = regexp.MustCompile("`([A-Z_]+)`")

// Errors are the error codes a method can answer, in the table's order:
// every method can fail validation, authentication, the body limit, the
// rate limit, the database and a bug; bearer methods can be denied;
// methods on a tenant or a resource in it can miss it (the operator, who may
// act on any tenant, is told a tenant does not exist);
// an expectedVersion can conflict; and any code the method's notes name.
func (m *Method) Errors() []errs.Code {
	has := map[errs.Code]bool{errs.InvalidInput: true, errs.Unauthenticated: true, errs.PayloadTooLarge: true,
		errs.RateLimited: true, errs.Unavailable: true, errs.Internal: true}
	if m.Credential != JoinToken {
		has[errs.PermissionDenied] = true
	}
	if m.Resource != authz.Platform {
		has[errs.NotFound] = true
	}
	for _, f := range m.Input {
		if f.Name == "expectedVersion" {
			has[errs.Conflict] = true
		}
	}
	for _, n := range append([]string{m.Summary}, m.Notes...) {
		for _, c := range codeMention.FindAllStringSubmatch(n, -1) {
			has[errs.Code(c[1])] = true
		}
	}
	var out []errs.Code
	for _, row := range errs.Table() {
		if has[row.Code] {
			out = append(out, row.Code)
		}
	}
	return out
}

// OpenAPI renders the OpenAPI 3.1 document of the method surface.
func (r *Registry) OpenAPI(version string) map[string]any {
	paths := map[string]any{}
	table := errs.Table()
	for _, m := range r.order {
		responses := map[string]any{
			"200": map[string]any{"description": "the method's output",
				"headers": map[string]any{"X-Request-Id": map[string]any{"$ref": "#/components/headers/X-Request-Id"}},
				"content": map[string]any{"application/json": map[string]any{"schema": r.OutputSchema(m)}}},
		}
		for _, c := range append(m.Errors(), errs.OnEveryBody...) {
			responses[strconv.Itoa(c.HTTPStatus())] = map[string]any{"$ref": "#/components/responses/" + string(c)}
		}
		op := map[string]any{
			"operationId": m.Group + "_" + m.Name,
			"summary":     m.Summary,
			"description": strings.Join(append([]string{m.Summary}, m.Notes...), "\n\n") +
				"\n\nAuthorization: `" + m.Authorization() + "`. Module: `" + m.Module + "`. Phase: " + m.Phase + ". Body: at most " + m.bodyLimitText() + ".",
			"tags": []string{m.Group},
			"requestBody": map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": m.InputSchema()}}},
			"responses":       responses,
			"x-kind":          m.Kind,
			"x-authorization": m.Authorization(),
			"x-module":        m.Module,
			"x-phase":         m.Phase,
			"x-status":        m.Status,
		}
		if m.Credential == JoinToken {
			op["security"] = []any{}
		}
		paths[m.Path()] = map[string]any{"post": op}
	}
	codes := make([]string, 0, len(table))
	responses := map[string]any{}
	for _, row := range table {
		codes = append(codes, string(row.Code))
		resp := map[string]any{
			"description": fmt.Sprintf("`%s`: %s. %s", row.Code, row.When, row.Do),
			"headers":     map[string]any{"X-Request-Id": map[string]any{"$ref": "#/components/headers/X-Request-Id"}},
			"content":     map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": RefPrefix + "Error"}}},
		}
		if row.Code == errs.RateLimited {
			resp["headers"].(map[string]any)["Retry-After"] = map[string]any{
				"description": "seconds to wait before retrying", "required": true, "schema": map[string]any{"type": "integer", "minimum": 1}}
		}
		responses[string(row.Code)] = resp
	}
	for _, row := range errs.Transport() { // answered before a method runs (405 on a method path)
		codes = append(codes, string(row.Code))
		if slices.Contains(errs.OnEveryBody, row.Code) {
			responses[string(row.Code)] = map[string]any{
				"description": fmt.Sprintf("`%s`: %s. %s", row.Code, row.When, row.Do),
				"headers": map[string]any{"X-Request-Id": map[string]any{"$ref": "#/components/headers/X-Request-Id"},
					"Accept-Encoding": map[string]any{"description": "the content codings a body may be sent in: `identity` (none)", "schema": map[string]any{"type": "string"}}},
				"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"$ref": RefPrefix + "Error"}}},
			}
		}
	}
	schemas := map[string]any{}
	for n, s := range r.Components() {
		schemas[n] = s
	}
	schemas["Error"] = map[string]any{
		"type": "object", "required": []string{"error"}, "additionalProperties": false,
		"description": "Every error answer of the method surface; GraphQL puts the same code and details in errors[].extensions.",
		"properties": map[string]any{"error": map[string]any{
			"type": "object", "required": []string{"code", "message", "details"}, "additionalProperties": false,
			"properties": map[string]any{
				"code":    map[string]any{"type": "string", "enum": codes},
				"message": map[string]any{"type": "string", "description": "for people; never parse it"},
				"details": map[string]any{"type": "object", "description": "the fields below where their codes give them (docs/api/errors.md, \"Details\")",
					"properties": detailProperties()},
			}}},
	}
	tags := []any{}
	for _, g := range r.Groups {
		tags = append(tags, map[string]any{"name": g.Name, "description": g.Summary})
	}
	return map[string]any{
		"openapi": "3.1.0",
		"info": map[string]any{"title": "Better Compute API", "version": version,
			"description": "The method surface: every method is `POST /api/compute/{group}/{method}` with a JSON object body.",
			"license":     map[string]any{"name": "Proprietary", "identifier": "LicenseRef-Proprietary"}},
		"servers":  []any{map[string]any{"url": "/", "description": "the server that serves this document"}},
		"tags":     tags,
		"paths":    paths,
		"security": []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer",
				"description": "an opaque token: the operator's, a tenant service token (tokens.create) or a node credential (nodes.join)"}},
			"headers": map[string]any{"X-Request-Id": map[string]any{"description": "names the server's log line of the request",
				"schema": map[string]any{"type": "string"}}},
			"responses": responses,
			"schemas":   schemas,
		},
	}
}

// Example is one recorded call of a method (docs/api/examples.json, written
// by make examples from a run of the e2e suite).
type Example struct {
	Request json.RawMessage `json:"request"`
	Answer  json.RawMessage `json:"answer"`
}

// Markdown renders the page of one group in the shape of the seed pages,
// with each method's output fields, errors and recorded example.
func (r *Registry) Markdown(group Group, examples map[string]Example) string {
	var b strings.Builder
	var ms []*Method
	for _, m := range r.order {
		if m.Group == group.Name {
			ms = append(ms, m)
		}
	}
	fmt.Fprintf(&b, "# %s\n\n%s\n\n", group.Name, group.Summary)
	served := 0
	for _, m := range ms {
		if m.Status == "registered" {
			served++
		}
	}
	fmt.Fprintf(&b, "%d of %d methods are served by this release.\n\n", served, len(ms))
	b.WriteString("| Method | Kind | Authorization | Phase | Status |\n|---|---|---|---|---|\n")
	for _, m := range ms {
		fmt.Fprintf(&b, "| [%s](#%s) | %s | %s | %s | %s |\n", m.Name, strings.ToLower(m.Name), m.Kind, cell(m.Authorization()), m.Phase, m.Status)
	}
	for _, m := range ms {
		fmt.Fprintf(&b, "\n## %s\n\n`POST %s`\n\n%s\n\n", m.Name, m.Path(), m.Summary)
		for _, n := range m.Notes {
			fmt.Fprintf(&b, "- %s\n", n)
		}
		if len(m.Notes) > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "- Kind: %s\n- Authorization: `%s`\n- Module: `%s`\n- Phase: %s (%s)\n- Body: at most %s of JSON (`PAYLOAD_TOO_LARGE` past it)\n\n",
			m.Kind, m.Authorization(), m.Module, m.Phase, m.Status, m.bodyLimitText())
		b.WriteString("### Input\n\n| Field | Type | Required | Constraints |\n|---|---|---|---|\n")
		for _, f := range flatten("", m.Input) {
			req := ""
			if f.Required {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, typeText(f), req, cell(f.Constraints()))
		}
		r.outputMarkdown(&b, m)
		errorsMarkdown(&b, m)
		exampleMarkdown(&b, m, examples)
	}
	return b.String()
}

func flatten(prefix string, fields []Field) []Field {
	var out []Field
	for _, f := range fields {
		g := f
		g.Name = prefix + f.Name
		out = append(out, g)
		if f.Type == Object && !f.Open {
			out = append(out, flatten(g.Name+".", f.Fields)...)
		}
		if f.Type == Array && f.Items != nil && f.Items.Type == Object && !f.Items.Open {
			out = append(out, flatten(g.Name+"[].", f.Items.Fields)...)
		}
	}
	return out
}

func typeText(f Field) string {
	if f.Type == Array && f.Items != nil {
		return "array of " + typeText(*f.Items)
	}
	if f.Schema != "" && len(f.Enum) == 0 {
		return string(f.Type) + " ([" + f.Schema + "](schemas.md#" + strings.ToLower(f.Schema) + "))"
	}
	return string(f.Type)
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }

// HandlersMarkdown renders docs/api/handlers.md: every method with the Go
// function that implements it and its input and output types, for a
// reader going from a method to its code.
func (r *Registry) HandlersMarkdown() string {
	var b strings.Builder
	b.WriteString("# Handlers\n\nGenerated from the method registry by `make generate`; do not edit.\n\n")
	b.WriteString("Where each method is implemented. A domain package registers its methods in its `Methods` function as `registry.Def(description, locate, handler)`; the handler is the function below, `func(ctx, store.Q, *Input) (*Output, error)`, and `go doc` finds it (`go doc ./internal/pools Create`). The method surface and GraphQL resolvers both reach it through the registry (`Dispatch` and `Call`), after the same validation, authorization and, for mutations, in the transaction that writes the audit record.\n\n")
	b.WriteString("| Method | Handler | Input | Output |\n|---|---|---|---|\n")
	for _, m := range r.order {
		fmt.Fprintf(&b, "| `%s` | `%s` | `%s` | `%s` |\n", m.Key(), goName(m.HandlerName()), goName(typeName(m.input)), goName(typeName(m.output)))
	}
	return b.String()
}

// modulePath is this module's import path, left out of the names above.
const modulePath = "github.com/bettercompute/computed/"

func goName(s string) string { return strings.ReplaceAll(s, modulePath, "") }

// typeName is a type's name with its package path (page.Page[T] with T's).
func typeName(t reflect.Type) string {
	if t == nil {
		return ""
	}
	if t.PkgPath() == "" {
		return t.String()
	}
	return t.PkgPath() + "." + t.Name()
}

// detailProperties is Error.details' properties, from the errs table of
// detail fields; details.reason lists its values with their codes.
func detailProperties() map[string]any {
	props := map[string]any{}
	for _, d := range errs.Details() {
		p := map[string]any{"description": d.When}
		for k, v := range d.Schema {
			p[k] = v
		}
		if d.Key == "reason" {
			var vals []string
			for _, r := range errs.Reasons() {
				vals = append(vals, fmt.Sprintf("`%s` (%s)", r.Value, r.Code))
			}
			p["description"] = "which rule refused, where one code covers several: " + strings.Join(vals, ", ")
		}
		props[d.Key] = p
	}
	return props
}
