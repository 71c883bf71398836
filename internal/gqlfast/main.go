// Command gqlfast rewrites gqlgen's generated executor (graph/*.generated.go)
// after `gqlgen generate`, in two places where gqlgen pays for features
// that a field or object does not use (make generate runs it; make
// check-generated therefore checks its output too):
//
//   - Leaf fields read straight from the bound struct (`return obj.X, nil`)
//     of a scalar or enum type whose marshaller cannot fail are marshalled
//     directly when graph.DirectLeaves is true: gqlgen's ResolveField would
//     allocate a field context, a context value, closures and an interface
//     box per value (about 8 allocations; a fleet query has 100000 such
//     values). Nothing in such a field can fail, panic or need its path.
//   - Objects build their @defer group only when one of their fields is
//     deferred (graph.newDeferredGroup): gqlgen builds one per object, path
//     included, whether or not the query uses @defer.
//   - Lists of objects that resolve nothing (no resolver field at any depth:
//     a node's GPUs) are marshalled in the calling goroutine
//     (graph.marshalSliceInline) instead of one goroutine per element. Lists
//     whose elements load anything keep their goroutines, so that a level's
//     loads still meet in one batch, unless the query selects none of the
//     fields that load (graph.marshalSliceAuto decides per list at run time
//     from graph.objectFields, which this command writes: a tenant's pools
//     asked for their names only need no goroutine per pool).
//   - Objects without deferred fields are written by graph.marshalObject:
//     gqlgen's FieldSet.MarshalGQL copies every field to the heap and builds
//     a map per object to skip repeated aliases.
//   - A list element of an object type is marshalled in place
//     (ec._T(ctx, sel, &v[i])) rather than through the by-value
//     marshaller, which copies each element to the heap for its address.
//   - A query's response buffer starts at the size of the last answer to
//     the same query text (graph.responseSizeHint) instead of growing by
//     doubling to 2.4 MB for a fleet query.
//
// See docs/performance.md for the measurements.
package main

import (
	"fmt"
	"go/format"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"
)

// leaf matches a generated field function whose resolver reads a struct
// field and whose marshaller is named after a GraphQL type.
var leaf = regexp.MustCompile(`(?m)^(func \(ec \*executionContext\) _\w+\(ctx context\.Context, field graphql\.CollectedField, obj [^)]+\) \(ret graphql\.Marshaler\) \{\n)` +
	`(\treturn graphql\.ResolveField\(\n` +
	`\t\tctx,\n\t\tec\.OperationContext,\n\t\tfield,\n` +
	`\t\tfunc\(ctx context\.Context, field graphql\.CollectedField\) \(\*graphql\.FieldContext, error\) \{\n\t\t\treturn ec\.fieldContext_\w+\(ctx, field\)\n\t\t\},\n` +
	`\t\tfunc\(ctx context\.Context\) \(any, error\) \{\n\t\t\treturn (obj\.[A-Za-z0-9_]+), nil\n\t\t\},\n` +
	`\t\tnil,\n` +
	`\t\tfunc\(ctx context\.Context, selections ast\.SelectionSet, v ([^)]+)\) graphql\.Marshaler \{\n\t\t\treturn ec\.(marshal([NO])([A-Za-z0-9]+)2[^(]+)\(ctx, selections, v\)\n\t\t\},\n)`)

// Go types whose values the leaf marshallers write without a possible
// null (non-null fields); nullable fields may also be pointers.
var valueTypes = map[string]bool{"string": true, "int": true, "int32": true, "int64": true, "bool": true, "float64": true}
var pointerTypes = map[string]bool{"*string": true, "*int": true, "*int32": true, "*int64": true, "*bool": true, "*float64": true, "*time.Time": true}

// Scalars whose marshallers cannot return null for a value of the types
// above (Time can: a zero time; it is only taken nullable, as a pointer).
var scalars = map[string]bool{"String": true, "Int": true, "Long": true, "Boolean": true, "Float": true, "ID": true, "Time": true}

// The query's response buffer, sized from the last answer to the same
// query text (graph.responseSizeHint).
const bufferOld = "\t\t\tvar buf bytes.Buffer\n\t\t\tdata.MarshalGQL(&buf)\n\t\t\tresponse.Data = buf.Bytes()\n"
const bufferNew = "\t\t\tbuf := bytes.NewBuffer(make([]byte, 0, responseSizeHint(opCtx.RawQuery)))\n\t\t\tdata.MarshalGQL(buf)\n\t\t\tresponse.Data = buf.Bytes()\n\t\t\trememberResponseSize(opCtx.RawQuery, len(response.Data))\n"

// An object without deferred fields is marshalled by graph.marshalObject
// instead of graphql.FieldSet's MarshalGQL, which copies every field to the
// heap (an iterator over &field) and builds a map per object to skip
// repeated aliases: a third of a fleet query's allocations.
const objectOld = "\t\tec.ProcessDeferredGroup(deferred)\n\t}\n\n\treturn out\n}"
const objectNew = "\t\tec.ProcessDeferredGroup(deferred)\n\t\treturn out\n\t}\n\n\treturn marshalObject(fields, out)\n}"

const deferredOld = "\tdeferred := graphql.NewDeferredGroup(ctx)\n"
const deferredNew = "\tdeferred := newDeferredGroup(ctx, fields)\n"

func main() {
	dir, schemaGlob := "graph", "schema/*.graphqls"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	enums, err := enumNames(schemaGlob)
	if err != nil {
		fail(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.generated.go"))
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		all.Write(b)
	}
	pure := purity(all.String(), enums)
	fields := objectFields(all.String())
	table, err := format.Source([]byte(fieldsSource(fields)))
	if err != nil {
		fail(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "fields.gqlfast.go"), table, 0o644); err != nil {
		fail(err)
	}
	// Marshallers of an object type taken by value (`return ec._T(ctx,
	// sel, &v)`): a list element passed to one is copied to the heap for
	// its address; the list's own element is addressed instead.
	byValue := map[string]string{}
	for _, m := range valueMarshaller.FindAllStringSubmatch(all.String(), -1) {
		byValue[m[1]] = m[2]
	}
	var leaves, groups, lists, autos, buffers, objects, elements int
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		src := string(b)
		n := 0
		src = leaf.ReplaceAllStringFunc(src, func(m string) string {
			g := leaf.FindStringSubmatch(m)
			expr, vtype, marshal, nullable, gqlType := g[3], g[4], g[5], g[6] == "O", g[7]
			if !scalars[gqlType] && !enums[gqlType] {
				return m
			}
			switch {
			case valueTypes[vtype] && gqlType != "Time":
			case nullable && pointerTypes[vtype]:
			default:
				return m
			}
			n++
			return g[1] + fmt.Sprintf("\tif DirectLeaves {\n\t\treturn ec.%s(ctx, field.Selections, %s)\n\t}\n", marshal, expr) + g[2]
		})
		src = sliceMarshal.ReplaceAllStringFunc(src, func(m string) string {
			g := sliceMarshal.FindStringSubmatch(m)
			if !pure(g[2]) {
				if fields[g[2]] == nil {
					return m
				}
				autos++
				return g[1] + fmt.Sprintf("marshalSliceAuto(ctx, %q, sel, len(v), ", g[2])
			}
			lists++
			return g[1] + "marshalSliceInline(ctx, len(v), "
		})
		buffers += strings.Count(src, bufferOld)
		src = strings.ReplaceAll(src, bufferOld, bufferNew)
		src = elementCall.ReplaceAllStringFunc(src, func(m string) string {
			g := elementCall.FindStringSubmatch(m)
			obj, ok := byValue[g[2]]
			if !ok {
				return m
			}
			elements++
			return g[1] + "ec._" + obj + "(ctx, sel, &v[i])"
		})
		objects += strings.Count(src, objectOld)
		src = strings.ReplaceAll(src, objectOld, objectNew)
		groups += strings.Count(src, deferredOld)
		src = strings.ReplaceAll(src, deferredOld, deferredNew)
		leaves += n
		if src != string(b) {
			if err := os.WriteFile(f, []byte(src), 0o644); err != nil {
				fail(err)
			}
		}
	}
	if buffers != 1 && !strings.Contains(all.String(), bufferNew) {
		fail(fmt.Errorf("found %d query response buffers, want 1: has gqlgen's executor template changed?", buffers))
	}
	if objects == 0 && !strings.Contains(all.String(), "return marshalObject(fields, out)") {
		fail(fmt.Errorf("found no object marshallers to rewrite: has gqlgen's object template changed?"))
	}
	fmt.Printf("gqlfast: %d leaf fields marshalled directly, %d objects with lazy @defer groups, %d objects marshalled without copies, %d list elements marshalled in place, %d lists marshalled inline, %d lists inline when their selection loads nothing, response buffers sized\n", leaves, groups, objects, elements, lists, autos)
}

// valueMarshaller matches a marshaller of an object type taken by value;
// elementCall, a list element handed to a marshaller.
var (
	valueMarshaller = regexp.MustCompile(`(?m)^func \(ec \*executionContext\) (marshalN[A-Za-z0-9]+2[^(ᚕᚖ]+)\(ctx context\.Context, sel ast\.SelectionSet, v [^)]+\) graphql\.Marshaler \{\n\treturn ec\._([A-Za-z0-9]+)\(ctx, sel, &v\)\n\}`)
	elementCall     = regexp.MustCompile(`(\t\treturn )ec\.(marshalN[A-Za-z0-9]+2[^(ᚕᚖ]+)\(ctx, sel, v\[i\]\)`)
)

// sliceMarshal matches the start of a generated list marshaller.
var sliceMarshal = regexp.MustCompile(`(func \(ec \*executionContext\) marshal[NO]([A-Za-z0-9]+)2ᚕ[^(]*\(ctx context\.Context, sel ast\.SelectionSet, v [^)]+\) graphql\.Marshaler \{\n\tret := )graphql\.MarshalSliceConcurrently\(ctx, len\(v\), 0, false, `)

var (
	objectFunc = regexp.MustCompile(`(?m)^func \(ec \*executionContext\) _([A-Za-z0-9]+)\(ctx context\.Context, sel ast\.SelectionSet, obj [^)]+\) graphql\.Marshaler \{\n`)
	fieldFunc  = regexp.MustCompile(`(?m)^func \(ec \*executionContext\) _([A-Za-z0-9]+)_([A-Za-z0-9_]+)\(ctx context\.Context, field graphql\.CollectedField, obj [^)]+\) \(ret graphql\.Marshaler\) \{\n`)
	marshalOf  = regexp.MustCompile(`return ec\.marshal[NO]([A-Za-z0-9]+)2`)
)

// purity returns whether marshalling a value of a GraphQL type resolves
// nothing: a scalar or enum, or an object none of whose fields, at any
// depth, is resolved concurrently (a resolver). Unknown types (interfaces,
// unions) and cycles count as impure.
func purity(src string, enums map[string]bool) func(string) bool {
	body := func(loc []int) string {
		end := strings.Index(src[loc[1]:], "\n}\n")
		if end < 0 {
			return src[loc[1]:]
		}
		return src[loc[1] : loc[1]+end]
	}
	objects := map[string]string{}
	for _, loc := range objectFunc.FindAllStringSubmatchIndex(src, -1) {
		objects[src[loc[2]:loc[3]]] = body(loc)
	}
	fieldTypes := map[string][]string{} // object -> its fields' types
	for _, loc := range fieldFunc.FindAllStringSubmatchIndex(src, -1) {
		obj := src[loc[2]:loc[3]]
		m := marshalOf.FindStringSubmatch(body(loc))
		t := "?"
		if m != nil {
			t = m[1]
		}
		fieldTypes[obj] = append(fieldTypes[obj], t)
	}
	memo := map[string]bool{}
	var pure func(t string) bool
	pure = func(t string) bool {
		if scalars[t] || enums[t] {
			return true
		}
		if v, ok := memo[t]; ok {
			return v
		}
		memo[t] = false // a cycle is impure
		b, ok := objects[t]
		if !ok || !strings.Contains(b, "graphql.CollectFields(") || strings.Contains(b, ".(type)") || strings.Contains(b, "ResolveConcurrently") {
			return false
		}
		for _, ft := range fieldTypes[t] {
			if !pure(ft) {
				return false
			}
		}
		memo[t] = true
		return true
	}
	return pure
}

// objectFields reads, for every object the executor marshals (interfaces
// and unions excepted), its fields: the GraphQL type each marshals (a
// list's element type) and whether it is resolved concurrently (a
// resolver: it may load).
func objectFields(src string) map[string]map[string]field {
	out := map[string]map[string]field{}
	for _, loc := range objectFunc.FindAllStringSubmatchIndex(src, -1) {
		obj := src[loc[2]:loc[3]]
		end := strings.Index(src[loc[1]:], "\n}\n")
		if end < 0 || !strings.Contains(src[loc[1]:loc[1]+end], "graphql.CollectFields(") || strings.Contains(src[loc[1]:loc[1]+end], ".(type)") {
			continue
		}
		fs := map[string]field{}
		for _, m := range caseField.FindAllStringSubmatch(src[loc[1]:loc[1]+end], -1) {
			fs[m[1]] = field{resolved: m[2] == "ResolveConcurrently"}
		}
		out[obj] = fs
	}
	for _, loc := range fieldFunc.FindAllStringSubmatchIndex(src, -1) {
		obj, name := src[loc[2]:loc[3]], src[loc[4]:loc[5]]
		fs := out[obj]
		f, ok := fs[name]
		if !ok {
			continue
		}
		end := strings.Index(src[loc[1]:], "\n}\n")
		if end < 0 {
			end = len(src) - loc[1]
		}
		if m := marshalOf.FindStringSubmatch(src[loc[1] : loc[1]+end]); m != nil {
			f.typ = m[1]
		}
		fs[name] = f
	}
	return out
}

type field struct {
	typ      string
	resolved bool
}

// caseField matches an object's field and how it is marshalled.
var caseField = regexp.MustCompile(`\n\t\tcase "([A-Za-z0-9_]+)":\n\t\t\t(?:out\.(ResolveConcurrently)|)`)

// fieldsSource is graph.objectFields as Go.
func fieldsSource(objs map[string]map[string]field) string {
	var b strings.Builder
	b.WriteString("// Code generated by internal/gqlfast. DO NOT EDIT.\n\npackage graph\n\n")
	b.WriteString("// objectFields is, per object, each field's GraphQL type (a list's element\n// type; empty for a leaf or an unknown type) and whether it is resolved\n// concurrently: marshalSliceAuto reads it.\n")
	b.WriteString("var objectFields = map[string]map[string]fieldInfo{\n")
	for _, o := range sortedKeys(objs) {
		fmt.Fprintf(&b, "\t%q: {\n", o)
		for _, f := range sortedKeys(objs[o]) {
			fi := objs[o][f]
			fmt.Fprintf(&b, "\t\t%q: {%q, %v},\n", f, fi.typ, fi.resolved)
		}
		b.WriteString("\t},\n")
	}
	b.WriteString("}\n")
	return b.String()
}

func sortedKeys[V any](m map[string]V) []string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	return keys
}

var enumDecl = regexp.MustCompile(`(?m)^\s*enum\s+([A-Za-z_][A-Za-z0-9_]*)`)

func enumNames(glob string) (map[string]bool, error) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no schema files at %s", glob)
	}
	out := map[string]bool{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		for _, m := range enumDecl.FindAllStringSubmatch(string(b), -1) {
			out[m[1]] = true
		}
	}
	return out, nil
}

func fail(err error) {
	fmt.Fprintln(os.Stderr, "gqlfast:", err)
	os.Exit(1)
}
