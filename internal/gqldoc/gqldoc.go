// Package gqldoc describes the graph's mutations from the method registry,
// so that GraphiQL's Docs pane, introspection and the printed schema say
// what the method pages say, from one source.
//
// schema/*.graphqls writes a mutation's description as the key of the
// method its resolver calls ("instances.create"); Describe replaces it
// with the method's summary and rules, and gives each field of the
// mutation's input type that the schema leaves undescribed the method's
// words for the field of the same name (its description and constraints).
// Whatever the schema files describe themselves is kept.
package gqldoc

import (
	"cmp"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"unicode"
	"unicode/utf8"

	"github.com/vektah/gqlparser/v2/ast"

	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/registry"
)

// methodKey is a description that names a method.
var methodKey = regexp.MustCompile(`^([a-zA-Z]+)\.([a-zA-Z]+)$`)

// Methods maps each mutation of s to the method key its description
// names; a mutation whose description is not a key maps to "".
func Methods(s *ast.Schema) map[string]string {
	out := map[string]string{}
	if s.Mutation == nil {
		return out
	}
	for _, f := range s.Mutation.Fields {
		if strings.HasPrefix(f.Name, "__") {
			continue
		}
		key := ""
		if methodKey.MatchString(f.Description) {
			key = f.Description
		}
		out[f.Name] = key
	}
	return out
}

// Describe returns s with its mutations and their input types described
// from reg. s itself is not changed (the parsed schema is shared by every
// server in the process): the definitions it describes are copies. A
// mutation naming no method of reg keeps its description.
func Describe(s *ast.Schema, reg *registry.Registry) *ast.Schema {
	if s.Mutation == nil {
		return s
	}
	c := *s
	c.Types = make(map[string]*ast.Definition, len(s.Types))
	for k, v := range s.Types {
		c.Types[k] = v
	}
	mut := copyDef(s.Mutation)
	c.Mutation = mut
	c.Types[mut.Name] = mut
	described := map[string]bool{} // input types, the first method's words
	for i, f := range mut.Fields {
		m := method(reg, f.Description)
		if m == nil {
			continue
		}
		nf := *f
		nf.Description = mutationText(m)
		nf.Arguments = append(ast.ArgumentDefinitionList(nil), f.Arguments...)
		for j, a := range nf.Arguments {
			if a.Name != "input" || a.Type == nil {
				continue
			}
			na := *a
			if na.Description == "" {
				na.Description = fmt.Sprintf("The fields of the body of `POST /api/compute/%s/%s`.", m.Group, m.Name)
			}
			nf.Arguments[j] = &na
			describeInput(&c, a.Type.Name(), m.Input, described, "")
		}
		mut.Fields[i] = &nf
	}
	describeShapes(&c)
	describeOutputFields(&c, reg)
	describeListArguments(&c)
	describeCommonFields(&c)
	unwrapAll(&c)
	return &c
}

// Unwrap joins the lines of each paragraph of a description that the
// schema files wrap at 100 columns: GraphiQL's Docs pane breaks a line at
// every newline, so a wrapped paragraph read ragged in its narrow pane.
// Paragraphs (a blank line apart), list items ("- ", "* ") and table rows
// ("|") keep their own lines.
func Unwrap(s string) string {
	if !strings.Contains(s, "\n") {
		return s
	}
	paras := strings.Split(s, "\n\n")
	for i, p := range paras {
		lines := strings.Split(p, "\n")
		var b strings.Builder
		for j, l := range lines {
			t := strings.TrimSpace(l)
			switch {
			case j == 0:
			case strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") || strings.HasPrefix(t, "|"):
				b.WriteString("\n")
			default:
				b.WriteString(" ")
			}
			if j == 0 || strings.HasPrefix(t, "- ") || strings.HasPrefix(t, "* ") || strings.HasPrefix(t, "|") {
				b.WriteString(strings.TrimRight(l, " "))
			} else {
				b.WriteString(t)
			}
		}
		paras[i] = b.String()
	}
	return strings.Join(paras, "\n\n")
}

// unwrapAll unwraps every description of s (types, fields, arguments,
// enum values), on copies of the definitions it changes (the parsed schema
// is shared by every server in the process).
func unwrapAll(s *ast.Schema) {
	for name, def := range s.Types {
		if def.BuiltIn {
			continue
		}
		nd := copyDef(def)
		nd.EnumValues = append(ast.EnumValueList(nil), def.EnumValues...)
		changed := false
		if d := Unwrap(def.Description); d != def.Description {
			nd.Description, changed = d, true
		}
		for i, f := range def.Fields {
			nf := *f
			nf.Arguments = append(ast.ArgumentDefinitionList(nil), f.Arguments...)
			fchanged := false
			if d := Unwrap(f.Description); d != f.Description {
				nf.Description, fchanged = d, true
			}
			for j, a := range f.Arguments {
				if d := Unwrap(a.Description); d != a.Description {
					na := *a
					na.Description = d
					nf.Arguments[j], fchanged = &na, true
				}
			}
			if fchanged {
				nd.Fields[i], changed = &nf, true
			}
		}
		for i, v := range def.EnumValues {
			if d := Unwrap(v.Description); d != v.Description {
				nv := *v
				nv.Description = d
				nd.EnumValues[i], changed = &nv, true
			}
		}
		if !changed {
			continue
		}
		replaceType(s, name, nd)
	}
}

// replaceType puts nd in s in place of the type name, and in the root it
// is (the schema's Query, Mutation or Subscription point at their types).
func replaceType(s *ast.Schema, name string, nd *ast.Definition) {
	s.Types[name] = nd
	for _, root := range []**ast.Definition{&s.Query, &s.Mutation, &s.Subscription} {
		if *root != nil && (*root).Name == name {
			*root = nd
		}
	}
}

// listArguments are the words of a list field's arguments that the schema
// leaves undescribed, by name: a connection's page and the filters the
// lists share with their methods' inputs. Their bounds (1 to page.MaxLimit
// items, page.DefaultLimit unless asked) showed nowhere in the Docs pane.
var listArguments = map[string]string{
	"first":       fmt.Sprintf("How many items the page holds: 1 to %d (the default is the field's).", page.MaxLimit),
	"after":       "Read the items after this one: an edge's `cursor` (or `pageInfo.endCursor`) of this same list; the list's start when omitted.",
	"poolId":      "Only those in this pool (its `poolId`).",
	"projectId":   "Only those of this project (its `projectId`).",
	"state":       "Only those in this state.",
	"principalId": "Only the records of this principal (its `principalId`).",
	"method":      "Only the records of this method, as on the method surface (`instances.stop`); `graphql` for a revoked token's uses of the graph, `unknown` for its uses of other paths.",
	"since":       "Only the records at or after this time (RFC 3339).",
	"until":       "Only the records before this time (RFC 3339); after `since`.",
	"resourceId":  "Only the records about this resource (its id).",
}

// commonFields are the words of the fields many types share, for those the
// schema leaves undescribed ("%s" is the type's name).
var commonFields = map[string]string{
	"id":          "The global id of this %s: `node(id:)` reads it again.",
	"createdAt":   "When the %s was created.",
	"updatedAt":   "When the %s last changed.",
	"rowVersion":  "The %s's version, one more at every change: pass it as `expectedVersion` to change it only if nobody changed it since.",
	"tenantId":    "The tenant the %s belongs to.",
	"poolId":      "The pool of the %s (its `poolId`).",
	"nodeId":      "The node of the %s (its `nodeId`).",
	"projectId":   "The project of the %s (its `projectId`); null for none.",
	"principalId": "The principal of the %s (its `principalId`).",
	"occurredAt":  "When the %s happened.",
	"expiresAt":   "When the %s expires.",
	"revokedAt":   "When the %s was revoked; null while it is in use.",
	"name":        "The %s's name.",
}

// describeCommonFields gives the fields of object types their
// commonFields words where the schema has none of its own.
func describeCommonFields(s *ast.Schema) {
	for name, def := range s.Types {
		if def.BuiltIn || def.Kind != ast.Object || strings.HasPrefix(name, "__") {
			continue
		}
		var nd *ast.Definition
		for i, f := range def.Fields {
			d := commonFields[f.Name]
			if d == "" || f.Description != "" {
				continue
			}
			if nd == nil {
				nd = copyDef(def)
			}
			nf := *f
			nf.Description = fmt.Sprintf(d, name)
			nd.Fields[i] = &nf
		}
		if nd != nil {
			replaceType(s, name, nd)
		}
	}
}

// GraphNames maps the output components of the method surface whose graph
// type has another name (the graph's Node is the Relay interface) to that
// type: their fields are one another's.
var GraphNames = map[string]string{
	"Node": "ComputeNode", "Snapshot": "InventorySnapshot", "DiffResult": "InventoryDiff", "Change": "InventoryChange",
	"GPU": "Gpu", "NIC": "Nic", "MIGDevice": "MigDevice",
	"Size": "InstanceSize", "Resources": "ResourceAmounts", "Quota": "PoolQuota", "Offer": "PoolOffer",
	"Issue": "ProfileIssue", "Validation": "ProfileValidation", "Rendered": "ProfileStep", "Step": "WorkflowStep",
	"Member": "ProjectMember", "Binding": "RoleBinding", "AllowedKey": "AllowedTpmKey",
}

// describeOutputFields gives the fields of an object type that the schema
// leaves undescribed the words of the method surface's output field of the
// same type and name (a Go field's doc tag, registry.FieldDoc): a Profile's
// used means one thing on both surfaces, written once.
func describeOutputFields(s *ast.Schema, reg *registry.Registry) {
	component := map[string]string{}
	for c, g := range GraphNames {
		component[g] = c
	}
	for name, def := range s.Types {
		if def.BuiltIn || def.Kind != ast.Object || strings.HasPrefix(name, "__") {
			continue
		}
		var nd *ast.Definition
		for i, f := range def.Fields {
			d := reg.FieldDoc(cmp.Or(component[name], name), f.Name)
			if f.Name == "id" && slices.Contains(def.Interfaces, "Node") {
				continue // the Relay global id, not the method surface's id
			}
			if d == "" || f.Description != "" {
				continue
			}
			if nd == nil {
				nd = copyDef(def)
			}
			nf := *f
			nf.Description = d
			nd.Fields[i] = &nf
		}
		if nd != nil {
			replaceType(s, name, nd)
		}
	}
}

// describeListArguments gives the arguments of connection fields their
// listArguments words where the schema has none of its own.
func describeListArguments(s *ast.Schema) {
	for name, def := range s.Types {
		if def.BuiltIn || (def.Kind != ast.Object && def.Kind != ast.Interface) {
			continue
		}
		var nd *ast.Definition
		for i, f := range def.Fields {
			if f.Type == nil || !strings.HasSuffix(f.Type.Name(), "Connection") {
				continue
			}
			var nf *ast.FieldDefinition
			for j, a := range f.Arguments {
				d := listArguments[a.Name]
				if d == "" || a.Description != "" {
					continue
				}
				if nd == nil {
					nd = copyDef(def)
				}
				if nf == nil {
					c := *f
					c.Arguments = append(ast.ArgumentDefinitionList(nil), f.Arguments...)
					nf = &c
					nd.Fields[i] = nf
				}
				na := *a
				na.Description = d
				nf.Arguments[j] = &na
			}
		}
		if nd != nil {
			replaceType(s, name, nd)
		}
	}
}

// describeShapes describes the types the schema leaves undescribed whose
// shape says what they are: a list's connection and edge (by name, with
// their Relay fields), a mutation's payload and input (by the mutations
// that answer or take them).
func describeShapes(s *ast.Schema) {
	answers, takes := map[string][]string{}, map[string][]string{}
	for _, f := range s.Mutation.Fields {
		if strings.HasPrefix(f.Name, "__") || f.Type == nil {
			continue
		}
		answers[f.Type.Name()] = append(answers[f.Type.Name()], "`"+f.Name+"`")
		if a := f.Arguments.ForName("input"); a != nil && a.Type != nil {
			takes[a.Type.Name()] = append(takes[a.Type.Name()], "`"+f.Name+"`")
		}
	}
	describe := func(name, desc string, fields map[string]string) {
		def := s.Types[name]
		if def == nil || def.BuiltIn {
			return
		}
		nd := copyDef(def)
		if nd.Description == "" {
			nd.Description = desc
		}
		for i, f := range nd.Fields {
			if d := fields[f.Name]; d != "" && f.Description == "" {
				nf := *f
				nf.Description = d
				nd.Fields[i] = &nf
			}
		}
		s.Types[name] = nd
	}
	for name, def := range s.Types {
		item := func(list string) string {
			if f := def.Fields.ForName(list); f != nil && f.Type != nil {
				if e := s.Types[f.Type.Name()]; e != nil {
					if n := e.Fields.ForName("node"); n != nil && n.Type != nil {
						return n.Type.Name()
					}
				}
			}
			return ""
		}
		switch {
		case def.Kind == ast.Object && strings.HasSuffix(name, "Connection") && item("edges") != "":
			describe(name, fmt.Sprintf("A page of a list of `%s`.", item("edges")), map[string]string{
				"edges":      "The page's items in the list's order, each with its cursor.",
				"pageInfo":   "Whether items follow, and the cursors of the page's ends.",
				"totalCount": "How many items the whole list holds (its filters applied), whichever page this is.",
			})
		case def.Kind == ast.Object && strings.HasSuffix(name, "Edge") && def.Fields.ForName("cursor") != nil && def.Fields.ForName("node") != nil:
			describe(name, fmt.Sprintf("One `%s` of a page, with its cursor.", def.Fields.ForName("node").Type.Name()), map[string]string{
				"cursor": "Pass it as `after` to read the items that follow this one.",
				"node":   "The item.",
			})
		case len(answers[name]) > 0 && def.Kind == ast.Object:
			describe(name, "What "+strings.Join(answers[name], ", ")+" answer"+plural(answers[name])+".", nil)
		case len(takes[name]) > 0 && def.Kind == ast.InputObject:
			describe(name, "The input of "+strings.Join(takes[name], ", ")+".", nil)
		}
	}
}

// plural is the verb's ending for a list of subjects: "s" for one.
func plural(subjects []string) string {
	if len(subjects) == 1 {
		return "s"
	}
	return ""
}

// method is the method a description names, or nil.
func method(reg *registry.Registry, desc string) *registry.Method {
	g := methodKey.FindStringSubmatch(desc)
	if g == nil || reg == nil {
		return nil
	}
	m, ok := reg.Lookup(g[1], g[2])
	if !ok || m.Kind != registry.Mutation {
		return nil
	}
	return m
}

// mutationText is a mutation's description: the method's summary, its
// rules, and where its page is.
func mutationText(m *registry.Method) string {
	var b strings.Builder
	b.WriteString(m.Summary)
	for _, n := range m.Notes {
		b.WriteString("\n\n")
		b.WriteString(n)
	}
	fmt.Fprintf(&b, "\n\nThe method `%s.%s` (`POST /api/compute/%s/%s`); the permission `%s` on `%s`.",
		m.Group, m.Name, m.Group, m.Name, m.Permission, m.Resource)
	return b.String()
}

// describeInput describes the undescribed fields of input type name from
// fields, and the input types of its object fields from theirs; an
// undescribed type takes desc (an object field's words for its value).
func describeInput(s *ast.Schema, name string, fields []registry.Field, described map[string]bool, desc string) {
	def := s.Types[name]
	if def == nil || def.Kind != ast.InputObject || described[name] {
		return
	}
	described[name] = true
	nd := copyDef(def)
	if nd.Description == "" {
		nd.Description = fieldText("", registry.Field{Description: desc}, nil)
	}
	s.Types[name] = nd
	for i, f := range nd.Fields {
		rf := field(fields, f.Name)
		if rf == nil {
			continue
		}
		if d := fieldText(f.Description, *rf, s.Types[f.Type.Name()]); d != f.Description {
			nf := *f
			nf.Description = d
			nd.Fields[i] = &nf
		}
		switch {
		case rf.Type == registry.Object && len(rf.Fields) > 0:
			describeInput(s, f.Type.Name(), rf.Fields, described, rf.Description)
		case rf.Type == registry.Array && rf.Items != nil && len(rf.Items.Fields) > 0:
			describeInput(s, f.Type.Name(), rf.Items.Fields, described, rf.Items.Description)
		}
	}
}

func field(fields []registry.Field, name string) *registry.Field {
	for i := range fields {
		if fields[i].Name == name {
			return &fields[i]
		}
	}
	return nil
}

// fieldText is an input field's description: the schema's own words
// (own) or else the method's, then the field's constraints, as the method
// page's input table gives them. An enum's values and default are left to
// the graph's own enum type (the method surface spells them in lower case).
func fieldText(own string, f registry.Field, typ *ast.Definition) string {
	if typ != nil && typ.Kind == ast.Enum {
		f.Enum, f.Default = nil, nil
	}
	words := own
	if words == "" {
		words = f.Description
		if words == "" && f.Schema != "" {
			words = registry.SchemaDescription(f.Schema)
		}
	}
	var parts []string
	for _, p := range []string{words, f.Constraints()} {
		if p = strings.TrimSuffix(strings.TrimSpace(p), "."); p != "" {
			r, n := utf8.DecodeRuneInString(p)
			parts = append(parts, string(unicode.ToUpper(r))+p[n:]+".")
		}
	}
	return strings.Join(parts, " ")
}

// copyDef copies a definition and its field list (the fields themselves
// are replaced, never changed, by the callers).
func copyDef(d *ast.Definition) *ast.Definition {
	nd := *d
	nd.Fields = append(ast.FieldList(nil), d.Fields...)
	return &nd
}
