package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	gql "github.com/vektah/gqlparser/v2/ast"
)

// committed reads the committed executor (gqlgen's output rewritten) and
// the schema it was generated from.
func committed(t *testing.T) (map[string]string, string, *gql.Schema) {
	t.Helper()
	files, _ := filepath.Glob("../../graph/*.generated.go")
	if len(files) == 0 {
		t.Fatal("no generated executor in ../../graph")
	}
	out := map[string]string{}
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		out[filepath.Base(f)] = string(b)
	}
	table, err := os.ReadFile("../../graph/fields.gqlfast.go")
	if err != nil {
		t.Fatal(err)
	}
	schema, err := loadSchema("../../schema/*.graphqls")
	if err != nil {
		t.Fatal(err)
	}
	return out, string(table), schema
}

var (
	directBlock  = regexp.MustCompile(`\tif directLeaves\(ec\.OperationContext\) \{\n\t\treturn [^\n]*\n\t\}\n`)
	inPlaceBlock = regexp.MustCompile(`\t\tif !unpatched\.elements \{\n\t\t\treturn ec\._\w+\(ctx, sel, &v\[i\]\)\n\t\t\}\n`)
	autoCall     = regexp.MustCompile(`marshalSliceAuto\(ctx, "\w+", sel, len\(v\), `)
)

// gqlgenOutput undoes every rewrite: what gqlgen wrote before gqlfast ran
// (checked against a fresh `go tool gqlgen generate` when this was
// written: byte for byte the same).
func gqlgenOutput(files map[string]string) map[string]string {
	out := map[string]string{}
	for name, src := range files {
		src = directBlock.ReplaceAllString(src, "")
		src = inPlaceBlock.ReplaceAllString(src, "")
		src = strings.ReplaceAll(src, "marshalSliceInline(ctx, len(v), ", "graphql.MarshalSliceConcurrently(ctx, len(v), 0, false, ")
		src = autoCall.ReplaceAllString(src, "graphql.MarshalSliceConcurrently(ctx, len(v), 0, false, ")
		src = strings.ReplaceAll(src, objectNew, objectOld)
		src = strings.ReplaceAll(src, deferredNew, deferredOld)
		src = strings.ReplaceAll(src, bufferNew, bufferOld)
		src = strings.ReplaceAll(src, mutationBufferNew, mutationBufferOld)
		src = strings.ReplaceAll(src, eventBufferNew, eventBufferOld)
		out[name] = src
	}
	return out
}

// gqlgen's output rewritten is what is committed (make check-generated
// holds the same after a real gqlgen run), and every expectation holds.
func TestRewriteReproducesTheCommittedExecutor(t *testing.T) {
	files, table, schema := committed(t)
	raw := gqlgenOutput(files)
	for name, src := range raw {
		for _, fast := range []string{directLeaf, "marshalObject(", "newDeferredGroup(", "marshalSlice", "responseSizeHint(", "marshalBounded(", "unpatched."} {
			if strings.Contains(src, fast) {
				t.Fatalf("%s: undoing the rewrites left %q", name, fast)
			}
		}
	}
	res, err := rewrite(raw, schema)
	if err != nil {
		t.Fatal(err)
	}
	for name, src := range files {
		if res.files[name] != src {
			t.Errorf("%s: the rewrite of gqlgen's output differs from the committed file", name)
		}
	}
	if string(res.table) != table {
		t.Error("graph/fields.gqlfast.go differs from the table written from gqlgen's output")
	}
	t.Log(res.summary)
	if _, err := rewrite(files, schema); err == nil || !strings.Contains(err.Error(), "already rewritten") {
		t.Errorf("rewriting a rewritten executor: %v", err)
	}
}

// A change of gqlgen's output that stops a rewrite from applying where it
// should fails, naming the rewrite and what did not match: what a gqlgen
// upgrade that changes its templates would do to make generate.
func TestTemplateChangesFailLoudly(t *testing.T) {
	files, _, schema := committed(t)
	raw := gqlgenOutput(files)
	// inFunc changes old to new inside one generated function only.
	inFunc := func(fn, old, new string) func(string) string {
		return func(src string) string {
			i := strings.Index(src, "func (ec *executionContext) "+fn+"(")
			if i < 0 {
				return src
			}
			j := i + strings.Index(src[i:], "\n}\n")
			return src[:i] + strings.Replace(src[i:j+3], old, new, 1) + src[j+3:]
		}
	}
	everywhere := func(old, new string) func(string) string {
		return func(src string) string { return strings.ReplaceAll(src, old, new) }
	}
	fieldContextClosure := "func(ctx context.Context, field graphql.CollectedField) (*graphql.FieldContext, error) {"
	for _, c := range []struct {
		name   string
		change func(string) string
		want   []string
	}{
		{"one leaf field's shape", inFunc("_Gpu_uuid", fieldContextClosure, "func(ctx context.Context, field graphql.CollectedField) (fc *graphql.FieldContext, err error) {"),
			[]string{rwLeaves, "1 of", "Gpu_uuid"}},
		{"every leaf field's shape", everywhere(fieldContextClosure, "func(ctx context.Context, field graphql.CollectedField) (fc *graphql.FieldContext, err error) {"),
			[]string{rwLeaves, "matched nothing"}},
		{"one object's @defer group", inFunc("_Gpu", "graphql.NewDeferredGroup(ctx)", "graphql.NewDeferredGroupOf(ctx, fields)"),
			[]string{rwDeferred, "1 of", "Gpu"}},
		{"one object's end", inFunc("_Gpu", objectOld, "\t\tec.ProcessDeferredGroup(deferred)\n\t}\n\treturn out\n}"),
			[]string{rwObjects, "1 of", "Gpu"}},
		{"the lists' call", everywhere("graphql.MarshalSliceConcurrently(ctx, len(v), 0, false, ", "graphql.MarshalSliceConcurrently(ctx, len(v), 0, true, "),
			[]string{rwLists}},
		{"the list elements' call", everywhere("(ctx, sel, v[i])", "(ctx, sel, v[i:][0])"),
			[]string{rwElements, "marshalNGpu2ᚕ"}},
		{"the by-value marshallers", everywhere("(ctx, sel, &v)\n}", "(ctx, sel, &(v))\n}"),
			[]string{rwElements}},
		{"the response buffer", everywhere(bufferOld, "\t\t\tbuf := new(bytes.Buffer)\n\t\t\tdata.MarshalGQL(buf)\n\t\t\tresponse.Data = buf.Bytes()\n"),
			[]string{rwBuffer, "found 0"}},
		{"resolver fields' call", everywhere("out.ResolveConcurrently(", "out.ResolveFieldConcurrently("),
			[]string{rwFields, "a resolver, not marked resolved"}},
	} {
		changed := map[string]string{}
		same := true
		for name, src := range raw {
			changed[name] = c.change(src)
			same = same && changed[name] == src
		}
		if same {
			t.Fatalf("%s: the change changed nothing", c.name)
		}
		_, err := rewrite(changed, schema)
		if err == nil {
			t.Errorf("%s: gqlfast did not fail", c.name)
			continue
		}
		for _, w := range c.want {
			if !strings.Contains(err.Error(), w) {
				t.Errorf("%s: the error does not say %q:\n%v", c.name, w, err)
			}
		}
		if !strings.Contains(err.Error(), "has gqlgen's output changed?") {
			t.Errorf("%s: the error does not point at the upgrade notes", c.name)
		}
	}
}

// A field with directives keeps gqlgen's path (its directives must run),
// and is no shortfall.
func TestFieldsWithDirectivesAreLeftAlone(t *testing.T) {
	files, _, schema := committed(t)
	raw := gqlgenOutput(files)
	const plain = "\t\tnil,\n\t\tfunc(ctx context.Context, selections ast.SelectionSet, v string) graphql.Marshaler {\n\t\t\treturn ec.marshalNString2string(ctx, selections, v)"
	const withDirective = "\t\t" + directiveMiddleware + "\n\t\t\treturn ec._fieldMiddleware(ctx, obj, next)\n\t\t},\n\t\tfunc(ctx context.Context, selections ast.SelectionSet, v string) graphql.Marshaler {\n\t\t\treturn ec.marshalNString2string(ctx, selections, v)"
	changed := map[string]string{}
	n := 0
	for name, src := range raw {
		i := strings.Index(src, "func (ec *executionContext) _Gpu_uuid(")
		if i >= 0 && strings.Contains(src[i:], plain) {
			src = src[:i] + strings.Replace(src[i:], plain, withDirective, 1)
			n++
		}
		changed[name] = src
	}
	if n != 1 {
		t.Fatalf("Gpu.uuid's function not found (%d)", n)
	}
	res, err := rewrite(changed, schema)
	if err != nil {
		t.Fatal(err)
	}
	var all strings.Builder
	for _, src := range res.files {
		all.WriteString(src)
	}
	if i := strings.Index(all.String(), "func (ec *executionContext) _Gpu_uuid("); strings.HasPrefix(all.String()[i:], "func (ec *executionContext) _Gpu_uuid(ctx context.Context, field graphql.CollectedField, obj *inventory.GPU) (ret graphql.Marshaler) {\n"+directLeaf) {
		t.Fatal("a field with directives was marshalled directly")
	}
}

// The committed executor carries the rewrites where they matter: a GPU's
// uuid directly, GPU lists inline and in place, pool edges decided at run
// time (a pool loads: its edges keep their goroutines when the query
// reaches a loading field).
func TestGeneratedExecutorIsRewritten(t *testing.T) {
	files, _, _ := committed(t)
	var all strings.Builder
	for _, src := range files {
		all.WriteString(src)
	}
	src := all.String()
	for _, want := range []string{
		directLeaf + "\t\treturn ec.marshalNString2string(ctx, field.Selections, obj.UUID)\n\t}\n",
		`ret := marshalSliceAuto(ctx, "PoolEdge", sel, len(v), `,
		"return ec._Gpu(ctx, sel, &v[i])",
	} {
		if !strings.Contains(src, want) {
			t.Errorf("the generated executor lacks %q", want)
		}
	}
	inline := func(typ string) bool {
		re := regexp.MustCompile(`func \(ec \*executionContext\) marshalN` + typ + `2ᚕ[^\n]*\n\tret := marshalSliceInline\(`)
		return re.MatchString(src)
	}
	if !inline("Gpu") {
		t.Error("GPU lists are not marshalled inline")
	}
	if inline("PoolEdge") || inline("ComputeNodeEdge") {
		t.Error("lists of objects that load are marshalled inline")
	}
}
