package registry

import (
	"fmt"
	"strings"

	"github.com/bettercompute/computed/internal/errs"
)

// InputSchema is a method's input as a JSON Schema object.
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
}

// Index lists every method for GET /api/compute.
func (r *Registry) Index() map[string]any {
	list := make([]IndexEntry, 0, len(r.order))
	for _, m := range r.order {
		list = append(list, IndexEntry{Group: m.Group, Method: m.Name, Path: m.Path(), Summary: m.Summary,
			Kind: m.Kind, Authorization: m.Authorization(), Permission: m.Permission, Resource: m.Resource,
			Items: m.Items, Credential: m.Credential, Module: m.Module, Phase: m.Phase, Status: m.Status,
			InputSchema: m.InputSchema()})
	}
	return map[string]any{"methods": list}
}

// OpenAPI renders the OpenAPI 3.1 document of the method surface.
func (r *Registry) OpenAPI(version string) map[string]any {
	paths := map[string]any{}
	errorRef := map[string]any{"$ref": "#/components/responses/Error"}
	for _, m := range r.order {
		op := map[string]any{
			"operationId": m.Group + "_" + m.Name,
			"summary":     m.Summary,
			"description": strings.Join(append([]string{m.Summary}, m.Notes...), "\n\n") +
				"\n\nAuthorization: `" + m.Authorization() + "`. Module: `" + m.Module + "`. Phase: " + m.Phase + ".",
			"tags": []string{m.Group},
			"requestBody": map[string]any{"required": true, "content": map[string]any{
				"application/json": map[string]any{"schema": m.InputSchema()}}},
			"responses": map[string]any{
				"200": map[string]any{"description": "the method's output", "content": map[string]any{"application/json": map[string]any{"schema": map[string]any{"type": "object"}}}},
				"400": errorRef, "401": errorRef, "403": errorRef, "404": errorRef, "409": errorRef,
				"413": errorRef, "422": errorRef, "429": errorRef, "503": errorRef,
				"default": errorRef,
			},
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
	codes := make([]string, 0)
	for _, c := range []errs.Code{errs.InvalidInput, errs.Unauthenticated, errs.PermissionDenied, errs.NotFound, errs.Conflict,
		errs.InvalidState, errs.PayloadTooLarge, errs.RateLimited, errs.Unavailable, errs.Internal} {
		codes = append(codes, string(c))
	}
	tags := []any{}
	for _, g := range r.Groups {
		tags = append(tags, map[string]any{"name": g.Name, "description": g.Summary})
	}
	return map[string]any{
		"openapi":  "3.1.0",
		"info":     map[string]any{"title": "Better Compute API", "version": version},
		"tags":     tags,
		"paths":    paths,
		"security": []any{map[string]any{"bearer": []any{}}},
		"components": map[string]any{
			"securitySchemes": map[string]any{"bearer": map[string]any{"type": "http", "scheme": "bearer"}},
			"responses": map[string]any{"Error": map[string]any{
				"description": "an error",
				"content": map[string]any{"application/json": map[string]any{"schema": map[string]any{
					"type": "object", "required": []string{"error"},
					"properties": map[string]any{"error": map[string]any{
						"type": "object", "required": []string{"code", "message", "details"},
						"properties": map[string]any{
							"code":    map[string]any{"type": "string", "enum": codes},
							"message": map[string]any{"type": "string"},
							"details": map[string]any{"type": "object"},
						}}}}}},
			}},
		},
	}
}

// Markdown renders the page of one group in the shape of the seed pages.
func (r *Registry) Markdown(group Group) string {
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
		fmt.Fprintf(&b, "- Kind: %s\n- Authorization: `%s`\n- Module: `%s`\n- Phase: %s (%s)\n\n", m.Kind, m.Authorization(), m.Module, m.Phase, m.Status)
		b.WriteString("### Input\n\n| Field | Type | Required | Constraints |\n|---|---|---|---|\n")
		for _, f := range flatten("", m.Input) {
			req := ""
			if f.Required {
				req = "yes"
			}
			fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", f.Name, typeText(f), req, cell(f.Constraints()))
		}
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
	return string(f.Type)
}

func cell(s string) string { return strings.ReplaceAll(s, "|", `\|`) }
