package registry

// Output schemas: each method's 200 answer described by JSON Schema
// reflected from the Go type its handler returns (Def's Out), the type that
// encoding/json turns into the answer. The reflection follows encoding/json:
// json tags and names, omitempty (an omitted field is optional), embedded
// structs, pointers (nullable unless omitempty), time.Time (date-time),
// maps (additionalProperties) and slices.
//
// Values kept as JSON text (json.RawMessage: a profile document, inventory
// sections, a join request's hardware) and closed string sets have no Go
// type to reflect. Their package names a schema for them once
// (DefineSchema, DefineSchemaOf, DefineEnum), from the rules it validates,
// and the field refers to it by name with a `schema:"Name"` tag.

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sort"
	"strings"
	"sync"
	"time"
)

// RefPrefix is where component schemas live in the OpenAPI document.
const RefPrefix = "#/components/schemas/"

var (
	namedMu sync.Mutex
	// named holds the schemas defined by name; a nil entry is a Go type's
	// reflected schema, filled in when a registry renders.
	named     = map[string]map[string]any{}
	namedType = map[reflect.Type]string{}
	unions    = map[string]union{}
)

type union struct {
	description string
	types       []reflect.Type
}

func define(name string, s map[string]any, t reflect.Type) string {
	namedMu.Lock()
	defer namedMu.Unlock()
	if _, dup := named[name]; dup {
		panic("registry: schema " + name + " defined twice")
	}
	named[name] = s
	if t != nil {
		namedType[t] = name
	}
	return name
}

// DefineSchema names a JSON Schema (2020-12) given as JSON text, for a value
// the owning package validates itself. $schema and $id are dropped: inside
// the OpenAPI document the schema is a component. It returns name, so a
// package can keep it in a variable.
func DefineSchema(name, schemaJSON string) string {
	var s map[string]any
	if err := json.Unmarshal([]byte(schemaJSON), &s); err != nil {
		panic(fmt.Sprintf("registry: schema %s: %v", name, err))
	}
	delete(s, "$schema")
	delete(s, "$id")
	return define(name, s, nil)
}

// refinements add to the schema reflected from a struct type what its Go
// type cannot say: the bounds its package checks (Refine).
var refinements = map[reflect.Type]func(map[string]any){}

// Refine has f add to the schema reflected from T (an object schema with
// properties and required) the rules its package enforces on it, from the
// constants that package checks with: a client validating against the
// OpenAPI document then sends what the server takes (an inventory report
// within the document was refused for bounds it did not state).
func Refine[T any](f func(s map[string]any)) {
	namedMu.Lock()
	defer namedMu.Unlock()
	refinements[reflect.TypeFor[T]()] = f
}

// Props is the properties of an object schema, for Refine's functions.
func Props(s map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	props, _ := s["properties"].(map[string]any)
	for k, v := range props {
		if p, ok := v.(map[string]any); ok {
			out[k] = p
		}
	}
	return out
}

// DefineSchemaOf names the schema reflected from T (a struct becomes the
// component name instead of its Go type name).
func DefineSchemaOf[T any](name string) string {
	return define(name, nil, reflect.TypeFor[T]())
}

// DefineAnyOf names a schema that is one of the given Go types' schemas; a
// nil type stands for null. For a field whose Go type is any.
func DefineAnyOf(name, description string, types ...reflect.Type) string {
	define(name, nil, nil)
	namedMu.Lock()
	defer namedMu.Unlock()
	unions[name] = union{description, types}
	return name
}

// DefineEnum names a closed set of strings.
func DefineEnum(name, description string, values ...string) string {
	s := map[string]any{"type": "string", "enum": append([]string{}, values...)}
	if description != "" {
		s["description"] = description
	}
	return define(name, s, nil)
}

// SchemaDescription is the description of a defined schema or enum ("" when
// it has none or name is not defined).
func SchemaDescription(name string) string {
	namedMu.Lock()
	defer namedMu.Unlock()
	d, _ := named[name]["description"].(string)
	return d
}

// EnumField is a string input field taking one value of a defined enum.
func EnumField(name, enum string, required bool) Field {
	return Field{Name: name, Type: String, Required: required, Enum: Enum(enum), Schema: enum}
}

// Enum returns the values of an enum defined with DefineEnum (nil when name
// is not one).
func Enum(name string) []string {
	namedMu.Lock()
	defer namedMu.Unlock()
	v, ok := named[name]["enum"].([]string)
	if !ok {
		panic("registry: no enum " + name)
	}
	return append([]string(nil), v...)
}

// schemaSet is a registry's rendered output schemas: one per method (refs
// into components), the components, and the problems found (fields whose
// schema says nothing because nothing names one).
type schemaSet struct {
	outputs    map[string]map[string]any // method key -> schema
	components map[string]any
	defined    []string // the components a package defined by name (DefineSchema...), sorted
	untyped    []string
}

var (
	timeType = reflect.TypeFor[time.Time]()
	rawType  = reflect.TypeFor[json.RawMessage]()
)

// reflector turns Go types into schemas. names is decided before any
// schema is rendered: a struct's component is its Go type name, qualified
// by its package when two reachable types share a name.
type reflector struct {
	names   map[reflect.Type]string
	defs    map[string]any
	untyped []string
	where   []string // type.field path, for problems
}

func (r *Registry) outputSchemas() *schemaSet {
	r.schemaOnce.Do(func() {
		namedMu.Lock()
		defer namedMu.Unlock()
		var roots []reflect.Type
		for _, m := range r.order {
			if m.output != nil {
				roots = append(roots, m.output)
			}
		}
		for t := range namedType {
			roots = append(roots, t)
		}
		for _, u := range unions {
			for _, t := range u.types {
				if t != nil {
					roots = append(roots, t)
				}
			}
		}
		rf := &reflector{names: componentNames(roots), defs: map[string]any{}}
		for t, n := range namedType {
			rf.names[t] = n
		}
		s := &schemaSet{outputs: map[string]map[string]any{}}
		for _, m := range r.order {
			if m.output == nil {
				s.outputs[m.Key()] = map[string]any{}
				continue
			}
			rf.where = []string{m.Key()}
			s.outputs[m.Key()] = rf.schema(m.output, true)
		}
		for n, def := range named {
			if def != nil {
				rf.defs[n] = def
			}
		}
		for t, n := range namedType {
			if _, done := rf.defs[n]; !done {
				rf.where = []string{n}
				rf.defs[n] = rf.body(t)
			}
		}
		for n, u := range unions {
			rf.where = []string{n}
			var alts []any
			for _, t := range u.types {
				if t == nil {
					alts = append(alts, map[string]any{"type": "null"})
					continue
				}
				alts = append(alts, rf.schema(t, true))
			}
			rf.defs[n] = map[string]any{"anyOf": alts, "description": u.description}
		}
		for n := range named {
			s.defined = append(s.defined, n)
		}
		sort.Strings(s.defined)
		s.components, s.untyped = rf.defs, rf.untyped
		sort.Strings(s.untyped)
		r.schemas = s
	})
	return r.schemas
}

// componentNames names every named struct type reachable from roots.
func componentNames(roots []reflect.Type) map[reflect.Type]string {
	seen := map[reflect.Type]bool{}
	var walk func(t reflect.Type)
	walk = func(t reflect.Type) {
		for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array || t.Kind() == reflect.Map {
			t = t.Elem()
		}
		if t.Kind() != reflect.Struct || t == timeType || seen[t] {
			return
		}
		seen[t] = true
		for i := 0; i < t.NumField(); i++ {
			walk(t.Field(i).Type)
		}
	}
	for _, t := range roots {
		walk(t)
	}
	byName := map[string][]reflect.Type{}
	for t := range seen {
		if component(t) {
			byName[t.Name()] = append(byName[t.Name()], t)
		}
	}
	names := map[reflect.Type]string{}
	for n, ts := range byName {
		for _, t := range ts {
			if len(ts) == 1 {
				names[t] = n
				continue
			}
			pkg := t.PkgPath()[strings.LastIndex(t.PkgPath(), "/")+1:]
			names[t] = strings.ToUpper(pkg[:1]) + pkg[1:] + n
		}
	}
	return names
}

// component says whether a struct type gets a component: named, and not a
// generic instance (page.Page[T] is rendered inline around T's component).
func component(t reflect.Type) bool {
	return t.Name() != "" && !strings.Contains(t.Name(), "[")
}

// schema renders t where it is used: a ref for a component, else inline.
// nullable is false for the root and for fields marked omitempty (encoding/json
// omits their nil value instead of writing null).
func (rf *reflector) schema(t reflect.Type, root bool) map[string]any {
	nullable := false
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
		nullable = !root
	}
	var s map[string]any
	if n, ok := rf.names[t]; ok && (t.Kind() == reflect.Struct || namedType[t] != "") {
		if _, done := rf.defs[n]; !done && named[n] == nil {
			rf.defs[n] = map[string]any{} // placeholder against recursion
			rf.defs[n] = rf.body(t)
		}
		s = map[string]any{"$ref": RefPrefix + n}
	} else {
		s = rf.body(t)
	}
	if nullable {
		return orNull(s)
	}
	return s
}

// orNull lets s also be null.
func orNull(s map[string]any) map[string]any {
	if typ, ok := s["type"].(string); ok {
		c := copyMap(s)
		c["type"] = []any{typ, "null"}
		return c
	}
	return map[string]any{"anyOf": []any{s, map[string]any{"type": "null"}}}
}

func copyMap(m map[string]any) map[string]any {
	c := make(map[string]any, len(m))
	for k, v := range m {
		c[k] = v
	}
	return c
}

// body renders t itself.
func (rf *reflector) body(t reflect.Type) map[string]any {
	switch {
	case t == timeType:
		return map[string]any{"type": "string", "format": "date-time"}
	case t == rawType:
		rf.untyped = append(rf.untyped, strings.Join(rf.where, "."))
		return map[string]any{}
	}
	switch t.Kind() {
	case reflect.Bool:
		return map[string]any{"type": "boolean"}
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		return map[string]any{"type": "integer"}
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return map[string]any{"type": "integer", "minimum": 0}
	case reflect.Float32, reflect.Float64:
		return map[string]any{"type": "number"}
	case reflect.String:
		return map[string]any{"type": "string"}
	case reflect.Slice, reflect.Array:
		if t.Elem().Kind() == reflect.Uint8 && t.Kind() == reflect.Slice {
			return map[string]any{"type": "string", "contentEncoding": "base64"}
		}
		return map[string]any{"type": "array", "items": rf.schema(t.Elem(), false)}
	case reflect.Map:
		return map[string]any{"type": "object", "additionalProperties": rf.schema(t.Elem(), false)}
	case reflect.Struct:
		props := map[string]any{}
		req := []string{}
		rf.fields(t, props, &req)
		s := map[string]any{"type": "object", "properties": props, "required": req}
		if f := refinements[t]; f != nil {
			f(s)
		}
		return s
	}
	// An interface: any JSON value.
	rf.untyped = append(rf.untyped, strings.Join(rf.where, "."))
	return map[string]any{}
}

// fields adds t's JSON fields (embedded structs flattened) to props.
func (rf *reflector) fields(t reflect.Type, props map[string]any, req *[]string) {
	for i := 0; i < t.NumField(); i++ {
		f := t.Field(i)
		tag := f.Tag.Get("json")
		if tag == "-" {
			continue
		}
		name, opts, _ := strings.Cut(tag, ",")
		if f.Anonymous && name == "" {
			et := f.Type
			if et.Kind() == reflect.Pointer {
				et = et.Elem()
			}
			if et.Kind() == reflect.Struct {
				rf.fields(et, props, req)
				continue
			}
		}
		if !f.IsExported() {
			continue
		}
		if name == "" {
			name = f.Name
		}
		omit := strings.Contains(","+opts+",", ",omitempty,") || strings.Contains(","+opts+",", ",omitzero,")
		rf.where = append(rf.where, t.Name()+"."+name)
		var s map[string]any
		if ref := f.Tag.Get("schema"); ref != "" {
			if _, ok := named[ref]; !ok {
				panic(fmt.Sprintf("registry: %s.%s names schema %q, which no package defines", t.Name(), f.Name, ref))
			}
			s = map[string]any{"$ref": RefPrefix + ref}
			if f.Type.Kind() == reflect.Pointer && !omit {
				s = orNull(s)
			}
		} else {
			s = rf.schema(f.Type, omit)
		}
		rf.where = rf.where[:len(rf.where)-1]
		if d := f.Tag.Get("doc"); d != "" {
			// What the field means, in the OpenAPI document, the method
			// pages and the graph's field of the same type and name
			// (gqldoc): written once, on the Go field.
			s = copyMap(s)
			s["description"] = d
		}
		props[name] = s
		if !omit {
			*req = append(*req, name)
		}
	}
}

// refs collects the component names s refers to, transitively.
func refs(s any, components map[string]any, into map[string]bool) {
	switch v := s.(type) {
	case map[string]any:
		for k, x := range v {
			if r, ok := x.(string); ok && k == "$ref" && strings.HasPrefix(r, RefPrefix) {
				n := strings.TrimPrefix(r, RefPrefix)
				if !into[n] {
					into[n] = true
					refs(components[n], components, into)
				}
				continue
			}
			refs(x, components, into)
		}
	case []any:
		for _, x := range v {
			refs(x, components, into)
		}
	}
}

// selfContained returns s with the components it refers to under $defs,
// refs rewritten to them: a schema that stands alone (the method index).
func selfContained(s map[string]any, components map[string]any) map[string]any {
	used := map[string]bool{}
	refs(s, components, used)
	out := rewrite(s).(map[string]any)
	if len(used) > 0 {
		defs := map[string]any{}
		for n := range used {
			defs[n] = rewrite(components[n])
		}
		out["$defs"] = defs
	}
	return out
}

func rewrite(s any) any {
	switch v := s.(type) {
	case map[string]any:
		c := make(map[string]any, len(v))
		for k, x := range v {
			if r, ok := x.(string); ok && k == "$ref" {
				c[k] = "#/$defs/" + strings.TrimPrefix(r, RefPrefix)
				continue
			}
			c[k] = rewrite(x)
		}
		return c
	case []any:
		c := make([]any, len(v))
		for i, x := range v {
			c[i] = rewrite(x)
		}
		return c
	}
	return s
}

// OutputSchema is the method's 200 answer as a JSON Schema whose refs point
// into the OpenAPI document's components (RefPrefix).
func (r *Registry) OutputSchema(m *Method) map[string]any {
	return r.outputSchemas().outputs[m.Key()]
}

// Components are the named schemas the outputs and inputs refer to.
func (r *Registry) Components() map[string]any { return r.outputSchemas().components }

// FieldDoc is the description of field of the output component name (a Go
// field's doc tag), "" when it has none.
func (r *Registry) FieldDoc(name, field string) string {
	c, _ := r.Components()[name].(map[string]any)
	props, _ := c["properties"].(map[string]any)
	p, _ := props[field].(map[string]any)
	d, _ := p["description"].(string)
	return d
}

// UntypedOutputs lists output fields whose schema accepts any JSON value:
// a json.RawMessage or interface field without a `schema` tag. A test keeps
// it empty.
func (r *Registry) UntypedOutputs() []string { return r.outputSchemas().untyped }
