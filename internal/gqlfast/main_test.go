package main

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// The committed executor carries the rewrites (make check-generated keeps
// it equal to gqlgen's output run through this command): if a gqlgen
// upgrade changed its templates so that the patterns no longer match, the
// rewrites would silently stop, and this test says so.
func TestGeneratedExecutorIsRewritten(t *testing.T) {
	files, _ := filepath.Glob("../../graph/*.generated.go")
	var all strings.Builder
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		all.Write(b)
	}
	src := all.String()
	for _, want := range []string{
		"\tif DirectLeaves {\n\t\treturn ec.marshalNString2string(ctx, field.Selections, obj.UUID)\n\t}\n", // a GPU's uuid
		"deferred := newDeferredGroup(ctx, fields)",
		bufferNew,
		`ret := marshalSliceAuto(ctx, "PoolEdge", sel, len(v), `, // inline when no pool field loads
	} {
		if !strings.Contains(src, want) {
			t.Errorf("the generated executor lacks %q", want)
		}
	}
	if strings.Contains(src, deferredOld) {
		t.Error("an object still builds its @defer group eagerly")
	}
	inline := func(typ string) bool {
		re := regexp.MustCompile(`func \(ec \*executionContext\) marshalN` + typ + `2ᚕ[^\n]*\n\tret := marshalSliceInline\(`)
		return re.MatchString(src)
	}
	if !inline("Gpu") {
		t.Error("GPU lists are not marshalled inline")
	}
	// A pool loads (its nodes, offers): its edges keep their goroutines so
	// that the loads of a level meet in one batch.
	if inline("PoolEdge") || inline("ComputeNodeEdge") {
		t.Error("lists of objects that load are marshalled inline")
	}
}
