// Command gqlfast rewrites gqlgen's generated executor (graph/*.generated.go)
// after `gqlgen generate`, where gqlgen pays for features that a field or
// object does not use (make generate runs it; make check-generated
// therefore checks its output too). Each rewrite is named below; docs/design.md
// ("gqlfast") says why each is safe and how to upgrade gqlgen.
//
//   - direct leaves: leaf fields read straight from the bound struct
//     (`return obj.X, nil`) of a scalar or enum type whose marshaller cannot
//     fail are marshalled directly when the operation has no field
//     interceptor (graph.directLeaves): gqlgen's ResolveField would allocate
//     a field context, a context value, closures and an interface box per
//     value (about 8 allocations; a fleet query has 100000 such values).
//     Nothing in such a field can fail, panic or need its path.
//   - lazy @defer groups: objects build their @defer group only when one of
//     their fields is deferred (graph.newDeferredGroup): gqlgen builds one
//     per object, path included, whether or not the query uses @defer.
//   - lists without a goroutine per element: lists of objects that resolve
//     nothing (no resolver field at any depth: a node's GPUs) are marshalled
//     in the calling goroutine (graph.marshalSliceInline). Lists whose
//     elements load anything keep their goroutines, so that a level's loads
//     still meet in one batch, unless the query selects none of the fields
//     that load (graph.marshalSliceAuto decides per list at run time from
//     graph.objectFields, which this command writes: a tenant's pools asked
//     for their names only need no goroutine per pool).
//   - objects without field copies: objects without deferred fields are
//     written by graph.marshalObject: gqlgen's FieldSet.MarshalGQL copies
//     every field to the heap and builds a map per object to skip repeated
//     aliases.
//   - list elements in place: a list element of an object type is
//     marshalled in place (ec._T(ctx, sel, &v[i])) rather than through the
//     by-value marshaller, which copies each element to the heap for its
//     address.
//   - response buffer sized: a query's response buffer starts at the size
//     of the last answer to the same query text (graph.responseSizeHint)
//     instead of growing by doubling to 2.4 MB for a fleet query.
//
// Every rewrite has an expectation derived from the schema and from what
// gqlgen itself says about each field (its field contexts), never from a
// count of today's schema: every object's marshaller, every list of
// objects, every field gqlgen binds to a struct field. When gqlgen's output
// changes so that a rewrite no longer applies where it should, gqlfast
// fails (make generate fails) naming the rewrite and what it expected.
// graph/gqlfast_test.go holds each rewrite to its purpose: the same answers
// as gqlgen's own code paths, and the allocations it exists to save.
//
// See docs/performance.md for the measurements.
package main

import (
	"errors"
	"fmt"
	"go/ast"
	"go/format"
	"go/parser"
	"go/token"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	"github.com/vektah/gqlparser/v2"
	gql "github.com/vektah/gqlparser/v2/ast"
)

// The rewrites, by the names their errors use.
const (
	rwLeaves   = "direct leaves"
	rwDeferred = "lazy @defer groups"
	rwLists    = "lists without a goroutine per element"
	rwObjects  = "objects without field copies"
	rwElements = "list elements in place"
	rwBuffer   = "response buffer sized"
	rwFields   = "field table (graph/fields.gqlfast.go)"
)

// leaf matches a generated field function whose resolver reads a struct
// field and whose marshaller is named after a GraphQL type.
var leaf = regexp.MustCompile(`(?m)^(func \(ec \*executionContext\) (_\w+)\(ctx context\.Context, field graphql\.CollectedField, obj [^)]+\) \(ret graphql\.Marshaler\) \{\n)` +
	`(\treturn graphql\.ResolveField\(\n` +
	`\t\tctx,\n\t\tec\.OperationContext,\n\t\tfield,\n` +
	`\t\tfunc\(ctx context\.Context, field graphql\.CollectedField\) \(\*graphql\.FieldContext, error\) \{\n\t\t\treturn ec\.fieldContext_\w+\(ctx, field\)\n\t\t\},\n` +
	`\t\tfunc\(ctx context\.Context\) \(any, error\) \{\n\t\t\treturn (obj\.[A-Za-z0-9_]+), nil\n\t\t\},\n` +
	`\t\tnil,\n` +
	`\t\tfunc\(ctx context\.Context, selections ast\.SelectionSet, v ([^)]+)\) graphql\.Marshaler \{\n\t\t\treturn ec\.(marshal([NO])([A-Za-z0-9_]+)2[^(]+)\(ctx, selections, v\)\n\t\t\},\n)`)

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
const bufferNew = "\t\t\tbuf := bytes.NewBuffer(make([]byte, 0, responseSizeHint(opCtx.RawQuery)))\n\t\t\tif !marshalBounded(data, buf) {\n\t\t\t\treturn answerTooLarge(ctx)\n\t\t\t}\n\t\t\tresponse.Data = buf.Bytes()\n\t\t\trememberResponseSize(opCtx.RawQuery, len(response.Data))\n"

// A subscription's event is bounded too, each event to graph.maxEventAnswer.
const eventBufferOld = "\t\t\tif data == nil {\n\t\t\t\treturn nil\n\t\t\t}\n\t\t\tdata.MarshalGQL(&buf)\n"
const eventBufferNew = "\t\t\tif data == nil {\n\t\t\t\treturn nil\n\t\t\t}\n\t\t\tif !marshalBoundedTo(data, &buf, maxEventAnswer) {\n\t\t\t\treturn eventTooLarge(ctx)\n\t\t\t}\n"

// A mutation's answer is bounded as a query's is (graph.marshalBounded).
const mutationBufferOld = "\t\t\tvar buf bytes.Buffer\n\t\t\tdata.MarshalGQL(&buf)\n\n\t\t\treturn &graphql.Response{\n\t\t\t\tData: buf.Bytes(),\n\t\t\t}\n"
const mutationBufferNew = "\t\t\tvar buf bytes.Buffer\n\t\t\tif !marshalBounded(data, &buf) {\n\t\t\t\treturn answerTooLarge(ctx)\n\t\t\t}\n\n\t\t\treturn &graphql.Response{\n\t\t\t\tData: buf.Bytes(),\n\t\t\t}\n"

// An object without deferred fields is marshalled by graph.marshalObject
// instead of graphql.FieldSet's MarshalGQL, which copies every field to the
// heap (an iterator over &field) and builds a map per object to skip
// repeated aliases: a third of a fleet query's allocations.
const objectOld = "\t\tec.ProcessDeferredGroup(deferred)\n\t}\n\n\treturn out\n}"
const objectNew = "\t\tec.ProcessDeferredGroup(deferred)\n\t\treturn out\n\t}\n\n\treturn marshalObject(fields, out)\n}"

const deferredOld = "\tdeferred := graphql.NewDeferredGroup(ctx)\n"
const deferredNew = "\tdeferred := newDeferredGroup(ctx, fields)\n"

// directiveMiddleware starts the middleware of a field with directives,
// which is never marshalled directly.
const directiveMiddleware = "func(ctx context.Context, next graphql.Resolver) graphql.Resolver {"

// directLeaf is the test a rewritten leaf field starts with.
const directLeaf = "\tif directLeaves(ec.OperationContext) {\n"

func main() {
	dir, schemaGlob := "graph", "schema/*.graphqls"
	if len(os.Args) > 1 {
		dir = os.Args[1]
	}
	schema, err := loadSchema(schemaGlob)
	if err != nil {
		fail(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.generated.go"))
	in := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fail(err)
		}
		in[filepath.Base(f)] = string(b)
	}
	res, err := rewrite(in, schema)
	if err != nil {
		fail(err)
	}
	for name, src := range res.files {
		if src != in[name] {
			if err := os.WriteFile(filepath.Join(dir, name), []byte(src), 0o644); err != nil {
				fail(err)
			}
		}
	}
	if err := os.WriteFile(filepath.Join(dir, "fields.gqlfast.go"), res.table, 0o644); err != nil {
		fail(err)
	}
	fmt.Println("gqlfast:", res.summary)
}

// result is gqlgen's output rewritten, and graph/fields.gqlfast.go.
type result struct {
	files   map[string]string
	table   []byte
	summary string
}

// rewrite applies every rewrite to gqlgen's output (file name to source)
// and holds each to its expectation: the error lists every rewrite that
// did not apply where the schema and gqlgen's output say it should.
func rewrite(in map[string]string, schema *gql.Schema) (*result, error) {
	names := sortedKeys(in)
	var all strings.Builder
	for _, n := range names {
		all.WriteString(in[n])
	}
	if strings.Contains(all.String(), directLeaf) || strings.Contains(all.String(), "return marshalObject(fields, out)") {
		return nil, errors.New("the executor is already rewritten: run `go tool gqlgen generate` first (make generate does)")
	}
	raw, err := functions(in)
	if err != nil {
		return nil, err
	}
	enums := map[string]bool{}
	for name, def := range schema.Types {
		if def.Kind == gql.Enum {
			enums[name] = true
		}
	}
	pure := purity(all.String(), enums)
	fields := objectFields(all.String())
	table, err := format.Source([]byte(fieldsSource(fields)))
	if err != nil {
		return nil, err
	}
	// Marshallers of an object type taken by value (`return ec._T(ctx,
	// sel, &v)`): a list element passed to one is copied to the heap for
	// its address; the list's own element is addressed instead.
	byValue := map[string]string{}
	for _, m := range valueMarshaller.FindAllStringSubmatch(all.String(), -1) {
		byValue[m[1]] = m[2]
	}
	var n counts
	structReads := map[string]bool{} // field functions the leaf pattern recognised
	out := map[string]string{}
	for _, name := range names {
		src := in[name]
		src = leaf.ReplaceAllStringFunc(src, func(m string) string {
			g := leaf.FindStringSubmatch(m)
			fn, expr, vtype, marshal, nullable, gqlType := g[2], g[4], g[5], g[6], g[7] == "O", g[8]
			structReads[fn] = true
			if !scalars[gqlType] && !enums[gqlType] {
				return m
			}
			switch {
			case valueTypes[vtype] && gqlType != "Time":
			case nullable && pointerTypes[vtype]:
			default:
				return m
			}
			n.leaves++
			return g[1] + directLeaf + fmt.Sprintf("\t\treturn ec.%s(ctx, field.Selections, %s)\n\t}\n", marshal, expr) + g[3]
		})
		src = sliceMarshal.ReplaceAllStringFunc(src, func(m string) string {
			g := sliceMarshal.FindStringSubmatch(m)
			if !pure(g[2]) {
				if fields[g[2]] == nil {
					return m
				}
				n.autos++
				return g[1] + fmt.Sprintf("marshalSliceAuto(ctx, %q, sel, len(v), ", g[2])
			}
			n.lists++
			return g[1] + "marshalSliceInline(ctx, len(v), "
		})
		n.buffers += strings.Count(src, bufferOld)
		src = strings.ReplaceAll(src, bufferOld, bufferNew)
		n.mutationBuffers += strings.Count(src, mutationBufferOld)
		src = strings.ReplaceAll(src, mutationBufferOld, mutationBufferNew)
		n.eventBuffers += strings.Count(src, eventBufferOld)
		src = strings.ReplaceAll(src, eventBufferOld, eventBufferNew)
		src = elementCall.ReplaceAllStringFunc(src, func(m string) string {
			g := elementCall.FindStringSubmatch(m)
			obj, ok := byValue[g[1]]
			if !ok {
				return m
			}
			n.elements++
			// gqlgen's own call stays behind the switch the tests turn.
			return "\t\tif !unpatched.elements {\n\t\t\treturn ec._" + obj + "(ctx, sel, &v[i])\n\t\t}\n" + m
		})
		n.objects += strings.Count(src, objectOld)
		src = strings.ReplaceAll(src, objectOld, objectNew)
		n.groups += strings.Count(src, deferredOld)
		src = strings.ReplaceAll(src, deferredOld, deferredNew)
		out[name] = src
	}
	rewritten, err := functions(out)
	if err != nil {
		return nil, fmt.Errorf("the rewritten executor does not parse: %v", err)
	}
	if err := expect(schema, raw, rewritten, structReads, fields, n); err != nil {
		return nil, err
	}
	return &result{files: out, table: table, summary: fmt.Sprintf(
		"%d leaf fields marshalled directly, %d objects with lazy @defer groups, %d objects marshalled without copies, %d list elements marshalled in place, %d lists marshalled inline, %d lists inline when their selection loads nothing, response buffers sized",
		n.leaves, n.groups, n.objects, n.elements, n.lists, n.autos)}, nil
}

type counts struct{ leaves, groups, objects, elements, lists, autos, buffers, mutationBuffers, eventBuffers int }

// expect holds each rewrite to what the schema and gqlgen's own output
// (raw) say it must reach, and returns every shortfall.
func expect(schema *gql.Schema, raw, out map[string]string, structReads map[string]bool, table map[string]map[string]field, n counts) error {
	var sf shortfalls
	expectLeaves(&sf, raw, structReads, n)
	expectObjects(&sf, schema, out)
	expectLists(&sf, schema, out, n)
	expectBuffer(&sf, schema, out, n)
	expectTable(&sf, schema, raw, table)
	if len(sf.errs) == 0 {
		return nil
	}
	sf.errs = append(sf.errs, errors.New("has gqlgen's output changed? docs/design.md (gqlfast) says how to upgrade gqlgen"))
	return errors.Join(sf.errs...)
}

// shortfalls collects what the rewrites did not reach.
type shortfalls struct{ errs []error }

// short records the names a rewrite missed out of of.
func (sf *shortfalls) short(rewrite, expected string, missing []string, of int) {
	if len(missing) == 0 {
		return
	}
	sort.Strings(missing)
	shown := missing
	if len(shown) > 8 {
		shown = append(shown[:8:8], fmt.Sprintf("and %d more", len(missing)-8))
	}
	sf.errs = append(sf.errs, fmt.Errorf("rewrite %q: expected %s; %d of %d did not match: %s",
		rewrite, expected, len(missing), of, strings.Join(shown, ", ")))
}

// none records a rewrite that matched nothing.
func (sf *shortfalls) none(rewrite, expected string) {
	sf.errs = append(sf.errs, fmt.Errorf("rewrite %q: expected %s; it matched nothing", rewrite, expected))
}

func expectLeaves(sf *shortfalls, raw map[string]string, structReads map[string]bool, n counts) {
	// direct leaves: every field gqlgen binds to a struct field (its field
	// context says neither method nor resolver, or its resolver returns
	// obj.X) is recognised, and then rewritten when its type allows; a
	// field with directives keeps gqlgen's path.
	var bound, unrecognised []string
	for name, body := range raw {
		if !isFieldFunction(name) || !strings.Contains(body, "field graphql.CollectedField, obj ") {
			continue
		}
		if !plainField(raw["fieldContext"+name]) && !readsStruct.MatchString(body) {
			continue
		}
		if strings.Contains(body, directiveMiddleware) {
			continue // its directives must run: gqlgen's path, knowingly
		}
		bound = append(bound, name)
		if !structReads[name] {
			unrecognised = append(unrecognised, strings.TrimPrefix(name, "_"))
		}
	}
	sf.short(rwLeaves, "every field bound to a struct field to be `return graphql.ResolveField(ctx, ec.OperationContext, field, fieldContext, func(ctx) { return obj.X, nil }, nil, marshaller)`", unrecognised, len(bound))
	if len(bound) == 0 || n.leaves == 0 {
		sf.none(rwLeaves, "leaf fields bound to struct fields of scalar or enum types")
	}
}

func expectObjects(sf *shortfalls, schema *gql.Schema, out map[string]string) {
	// Every object type (Subscription aside: its template has no field
	// set) has a marshaller, with a lazy @defer group and marshalled
	// without copies when nothing is deferred.
	var objects, noFunc, eagerGroup, copied []string
	for name, def := range schema.Types {
		if def.Kind != gql.Object || (schema.Subscription != nil && name == schema.Subscription.Name) {
			continue
		}
		objects = append(objects, name)
		body, ok := out["_"+name]
		if !ok || !strings.Contains(body, "ctx context.Context, sel ast.SelectionSet") {
			noFunc = append(noFunc, name)
			continue
		}
		if !strings.Contains(body, deferredNew) {
			eagerGroup = append(eagerGroup, name)
		}
		if !strings.HasSuffix(body, "return marshalObject(fields, out)\n}") {
			copied = append(copied, name)
		}
	}
	sf.short(rwDeferred+", "+rwObjects, "a marshaller func (ec *executionContext) _T(ctx, sel, ...) for every object type T", noFunc, len(objects))
	sf.short(rwDeferred, "every object's marshaller to build its group with `"+strings.TrimSpace(deferredOld)+"`", eagerGroup, len(objects))
	sf.short(rwObjects, "every object's marshaller to end with `"+strings.ReplaceAll(objectOld, "\n", `\n`)+"`", copied, len(objects))
}

func expectLists(sf *shortfalls, schema *gql.Schema, out map[string]string, n counts) {
	// Every list of an object type goes through marshalSliceInline or
	// marshalSliceAuto; one of values is marshalled element by element in
	// place.
	var lists, concurrent, values, copies []string
	for name, body := range out {
		m := listMarshaller.FindStringSubmatch(name)
		if m == nil {
			continue
		}
		def := schema.Types[m[2]]
		if def == nil || def.Kind != gql.Object || strings.HasPrefix(def.Name, "__") {
			continue // introspection's lists are left as gqlgen writes them
		}
		lists = append(lists, name)
		if !strings.Contains(body, "marshalSliceInline(ctx, len(v), ") && !strings.Contains(body, "marshalSliceAuto(ctx, ") {
			concurrent = append(concurrent, name)
		}
		if sig := listParam.FindStringSubmatch(body); sig != nil && !strings.HasPrefix(sig[1], "*") && !strings.HasPrefix(sig[1], "[]") {
			values = append(values, name)
			if !strings.Contains(body, "return ec._"+m[2]+"(ctx, sel, &v[i])") {
				copies = append(copies, name)
			}
		}
	}
	sf.short(rwLists, "every list marshaller of an object type to start (after `if v == nil { return graphql.Null }`) `ret := graphql.MarshalSliceConcurrently(ctx, len(v), 0, false, `", concurrent, len(lists))
	if len(lists) == 0 || n.lists == 0 {
		sf.none(rwLists, "list marshallers of object types (marshal[NO]T2ᚕ…) and lists of objects that resolve nothing")
	}
	sf.short(rwElements, "every list of object values to marshal `ec.marshalN…(ctx, sel, v[i])` with a by-value marshaller `return ec._T(ctx, sel, &v)`", copies, len(values))
	if len(values) == 0 {
		sf.none(rwElements, "list marshallers of object values (v []T)")
	}
}

func expectBuffer(sf *shortfalls, schema *gql.Schema, out map[string]string, n counts) {
	// One query response buffer, in Exec.
	if schema.Query != nil {
		if k := strings.Count(out["Exec"], bufferNew); k != 1 || n.buffers != 1 {
			sf.errs = append(sf.errs, fmt.Errorf("rewrite %q: expected one query response buffer in Exec written as `%s`; found %d", rwBuffer, strings.ReplaceAll(bufferOld, "\n", `\n`), n.buffers))
		}
	}
	if schema.Subscription != nil {
		if k := strings.Count(out["Exec"], eventBufferNew); k != 1 || n.eventBuffers != 1 {
			sf.errs = append(sf.errs, fmt.Errorf("rewrite %q: expected one subscription event buffer in Exec written as `%s`; found %d", rwBuffer, strings.ReplaceAll(eventBufferOld, "\n", `\n`), n.eventBuffers))
		}
	}
	if schema.Mutation != nil {
		if k := strings.Count(out["Exec"], mutationBufferNew); k != 1 || n.mutationBuffers != 1 {
			sf.errs = append(sf.errs, fmt.Errorf("rewrite %q: expected one mutation response buffer in Exec written as `%s`; found %d", rwBuffer, strings.ReplaceAll(mutationBufferOld, "\n", `\n`), n.mutationBuffers))
		}
	}
}

func expectTable(sf *shortfalls, schema *gql.Schema, raw map[string]string, table map[string]map[string]field) {
	// The field table names every field of every object with its type,
	// and marks every resolver as resolved concurrently.
	var tableFields, wrong []string
	for name, def := range schema.Types {
		if def.Kind != gql.Object || strings.HasPrefix(name, "__") || isRoot(schema, name) {
			continue
		}
		for _, f := range def.Fields {
			if strings.HasPrefix(f.Name, "__") {
				continue
			}
			tableFields = append(tableFields, name+"."+f.Name)
			got, ok := table[name][f.Name]
			switch {
			case !ok:
				wrong = append(wrong, name+"."+f.Name+" (missing)")
			case got.typ != f.Type.Name():
				wrong = append(wrong, fmt.Sprintf("%s.%s (type %q, want %q)", name, f.Name, got.typ, f.Type.Name()))
			case resolverField(raw["fieldContext_"+name+"_"+f.Name]) && !got.resolved:
				wrong = append(wrong, name+"."+f.Name+" (a resolver, not marked resolved)")
			}
		}
	}
	sf.short(rwFields, "every object's field in its marshaller's switch (`case \"f\":`, `out.ResolveConcurrently` for a resolver) and a field function `_T_f` returning `ec.marshal[NO]<Type>2…`", wrong, len(tableFields))
}

func isRoot(schema *gql.Schema, name string) bool {
	for _, r := range []*gql.Definition{schema.Query, schema.Mutation, schema.Subscription} {
		if r != nil && r.Name == name {
			return true
		}
	}
	return false
}

var (
	// readsStruct matches a field function whose resolver returns a
	// struct field of its object, whatever the shape around it.
	readsStruct = regexp.MustCompile(`\breturn obj\.[A-Za-z0-9_]+, nil\n`)
	// listMarshaller matches the name of a marshaller of a list (its
	// GraphQL element type in group 2).
	listMarshaller = regexp.MustCompile(`^marshal([NO])([A-Za-z0-9_]+?)2ᚕ`)
	// listParam is the Go type of a list marshaller's elements.
	listParam = regexp.MustCompile(`^func \(ec \*executionContext\) \S+?\(ctx context\.Context, sel ast\.SelectionSet, v \[\]([^)]+)\)`)
	// plainScalar and plainObject read gqlgen's field context: whether
	// the field is a method or a resolver (false, false: a struct field).
	plainScalar = regexp.MustCompile(`graphql\.NewScalarFieldContext\("([^"]*)", field, (true|false), (true|false),`)
	plainObject = regexp.MustCompile(`IsMethod:\s+(true|false),\s+IsResolver:\s+(true|false),`)
)

// isFieldFunction says whether a method's name is a field function's,
// _Object_field (an object's own marshaller is _Object; introspection
// types start with underscores too).
func isFieldFunction(name string) bool {
	rest := strings.TrimLeft(name, "_")
	return len(rest) < len(name) && strings.Contains(rest, "_")
}

// plainField says whether gqlgen's field context (the body of
// fieldContext_T_f) marks the field as neither a method nor a resolver.
func plainField(fieldContext string) bool {
	if m := plainScalar.FindStringSubmatch(fieldContext); m != nil {
		return m[2] == "false" && m[3] == "false"
	}
	if m := plainObject.FindStringSubmatch(fieldContext); m != nil {
		return m[1] == "false" && m[2] == "false"
	}
	return false
}

// resolverField says whether gqlgen's field context marks a resolver.
func resolverField(fieldContext string) bool {
	if m := plainScalar.FindStringSubmatch(fieldContext); m != nil {
		return m[3] == "true"
	}
	if m := plainObject.FindStringSubmatch(fieldContext); m != nil {
		return m[2] == "true"
	}
	return false
}

// functions maps the name of every method of the executor (on
// *executionContext or *executableSchema) to its source.
func functions(files map[string]string) (map[string]string, error) {
	out := map[string]string{}
	fset := token.NewFileSet()
	for name, src := range files {
		f, err := parser.ParseFile(fset, name, src, parser.SkipObjectResolution)
		if err != nil {
			return nil, err
		}
		base := fset.File(f.Pos()).Base()
		for _, d := range f.Decls {
			fd, ok := d.(*ast.FuncDecl)
			if !ok || fd.Recv == nil {
				continue
			}
			out[fd.Name.Name] = src[int(fd.Pos())-base : int(fd.End())-base]
		}
	}
	return out, nil
}

// valueMarshaller matches a marshaller of an object type taken by value;
// elementCall, a list element handed to a marshaller.
var (
	valueMarshaller = regexp.MustCompile(`(?m)^func \(ec \*executionContext\) (marshalN[A-Za-z0-9]+2[^(ᚕᚖ]+)\(ctx context\.Context, sel ast\.SelectionSet, v [^)]+\) graphql\.Marshaler \{\n\treturn ec\._([A-Za-z0-9]+)\(ctx, sel, &v\)\n\}`)
	elementCall     = regexp.MustCompile(`\t\treturn ec\.(marshalN[A-Za-z0-9]+2[^(ᚕᚖ]+)\(ctx, sel, v\[i\]\)\n`)
)

// sliceMarshal matches the start of a generated list marshaller.
var sliceMarshal = regexp.MustCompile(`(func \(ec \*executionContext\) marshal[NO]([A-Za-z0-9]+)2ᚕ[^(]*\(ctx context\.Context, sel ast\.SelectionSet, v [^)]+\) graphql\.Marshaler \{\n(?:\tif v == nil \{\n\t\treturn graphql\.Null\n\t\}\n)?\tret := )graphql\.MarshalSliceConcurrently\(ctx, len\(v\), 0, false, `)

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

// loadSchema reads the schema gqlgen generated from (with the prelude's
// scalars and introspection types).
func loadSchema(glob string) (*gql.Schema, error) {
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		return nil, fmt.Errorf("no schema files at %s", glob)
	}
	var sources []*gql.Source
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			return nil, err
		}
		sources = append(sources, &gql.Source{Name: f, Input: string(b)})
	}
	s, gerr := gqlparser.LoadSchema(sources...)
	if gerr != nil {
		return nil, gerr
	}
	return s, nil
}

func fail(err error) {
	for _, line := range strings.Split(err.Error(), "\n") {
		fmt.Fprintln(os.Stderr, "gqlfast:", line)
	}
	os.Exit(1)
}
