// Package schemaerr words a JSON Schema validation error's leaf as the
// method surface words the same refusal (internal/registry): "must be at
// most 86400000", "must be an integer", not the schema library's
// "maximum: got 4.6×10¹⁸, want 8.64×10⁰⁷". Pool policies and provisioning
// profiles (their documents and their steps' with) are checked by schemas.
package schemaerr

import (
	"math/big"
	"strconv"
	"strings"

	"github.com/santhosh-tekuri/jsonschema/v6"
	"github.com/santhosh-tekuri/jsonschema/v6/kind"
)

// typeWords names a JSON Schema type in a refusal.
var typeWords = map[string]string{"integer": "an integer", "number": "a number", "string": "a string",
	"object": "an object", "array": "an array", "boolean": "true or false", "null": "null"}

// Leaf is the refusal of e, a leaf of a validation error (one without
// causes), without its location.
func Leaf(e *jsonschema.ValidationError) string {
	switch k := e.ErrorKind.(type) {
	case *kind.Type:
		if len(k.Want) > 0 {
			want := make([]string, len(k.Want))
			for i, w := range k.Want {
				want[i] = typeWords[w]
				if want[i] == "" {
					want[i] = w
				}
			}
			return "must be " + strings.Join(want, " or ")
		}
	case *kind.Minimum:
		return "must be at least " + Number(k.Want)
	case *kind.Maximum:
		return "must be at most " + Number(k.Want)
	case *kind.ExclusiveMinimum:
		return "must be greater than " + Number(k.Want)
	case *kind.ExclusiveMaximum:
		return "must be less than " + Number(k.Want)
	case *kind.MultipleOf:
		return "must be a multiple of " + Number(k.Want)
	case *kind.MinLength:
		return "needs at least " + strconv.Itoa(k.Want) + " characters"
	case *kind.MaxLength:
		return "is longer than " + strconv.Itoa(k.Want) + " characters"
	case *kind.MinItems:
		return "needs at least " + strconv.Itoa(k.Want) + " items"
	case *kind.MaxItems:
		return "has more than " + strconv.Itoa(k.Want) + " items"
	case *kind.MinProperties:
		return "needs at least " + strconv.Itoa(k.Want) + " fields"
	case *kind.MaxProperties:
		return "has more than " + strconv.Itoa(k.Want) + " fields"
	case *kind.Pattern:
		// The library quotes the value whole: a 120 KB string of words
		// came back in the answer.
		if words, ok := patternWords[k.Want]; ok {
			return words
		}
		return "does not match the pattern " + strconv.Quote(k.Want)
	case *kind.Format:
		return "is not a valid " + k.Want
	}
	s := e.Error()
	// "jsonschema validation failed with ...\n- at '/x': msg" -> msg
	if i := strings.LastIndex(s, "': "); i >= 0 {
		return s[i+3:]
	}
	return s
}

// Number writes a schema's bound as written in a schema: 86400000, 0.5.
func Number(r *big.Rat) string {
	if r == nil {
		return "?"
	}
	if r.IsInt() {
		return r.Num().String()
	}
	f, _ := r.Float64()
	return strconv.FormatFloat(f, 'f', -1, 64)
}

// patternWords says in words what a pattern of a schema refuses, where the
// pattern alone reads as escapes.
var patternWords = map[string]string{
	"^[^\\x00-\\x1f\\x7f-\\x9f\u2028\u2029]*$":            "must not contain line breaks or other control characters",
	"^[^\\x00-\\x08\\x0a-\\x1f\\x7f-\\x9f\u2028\u2029]*$": "must not contain line breaks or control characters other than tab",
}
