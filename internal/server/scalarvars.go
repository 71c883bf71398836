package server

import (
	"context"
	"encoding/json"
	"math"
	"math/big"
	"reflect"
	"strings"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/gqlscalar"
)

// scalarVars coerces the variables of the graph's own scalars, its enums
// and its numbers before the operation runs, as the spec's
// CoerceVariableValues does: gqlparser checks a variable of a built-in
// scalar and takes any value for a custom one, so
// a Time variable that is not a time failed later, in the field that read
// it (a field error, 200), instead of refusing the request (400 under
// application/graphql-response+json, like a String variable given a
// number). The values are checked by the scalars' own functions, so both
// say the same words; nested input objects and lists are walked.
type scalarVars struct {
	schema *ast.Schema
}

// scalarCheck are the scalars bound to functions with a rule of their own
// (JSON takes any value). String is one: gqlgen decodes numbers as
// json.Number, a string to gqlparser's check, so a String variable given
// 5 (or a string with a NUL) also reached its field.
var scalarCheck = map[string]func(any) error{
	"Time":   func(v any) error { _, err := gqlscalar.UnmarshalTime(v); return err },
	"String": func(v any) error { _, err := gqlscalar.UnmarshalString(v); return err },
}

var _ interface {
	graphql.HandlerExtension
	graphql.OperationContextMutator
} = (*scalarVars)(nil)

func (*scalarVars) ExtensionName() string { return "ScalarVariables" }
func (c *scalarVars) Validate(es graphql.ExecutableSchema) error {
	c.schema = es.Schema()
	return nil
}

func (c *scalarVars) MutateOperationContext(_ context.Context, oc *graphql.OperationContext) *gqlerror.Error {
	if oc.Operation == nil {
		return nil
	}
	for _, d := range oc.Operation.VariableDefinitions {
		v, ok := oc.Variables[d.Variable]
		if !ok {
			continue
		}
		// A single value for a list is a list of one (the spec's input
		// coercion): gqlparser makes it a typed slice ([]string), which
		// gqlgen's list unmarshalling takes for one element, so "instance."
		// for [String!] was "must be a string".
		v = untyped(v)
		oc.Variables[d.Variable] = v
		if path, err := c.check(d.Type, v, "variable."+d.Variable, 0); err != nil {
			return variableError(path, "%s %s", path, messageOf(err))
		}
	}
	if name := nullCondition(oc.Operation.SelectionSet, oc.Variables, map[string]bool{}); name != "" {
		// gqlgen panics on it (an internal error where the caller erred).
		return variableError("variable."+name, "variable.%s is null where @skip or @include takes true or false", name)
	}
	return nil
}

// variableError is a variable's refusal: a request error, INVALID_INPUT
// with details.reason "validation" and the variable's path, as the
// validator's own refusals of variables are (2^63 for an Int was, where
// this check's 2^31 had no reason).
func variableError(path, format string, args ...any) *gqlerror.Error {
	e := errs.Invalid(path, format, args...)
	ge := gqlerror.Errorf("%s", e.Message)
	details := map[string]any{"reason": "validation"}
	for k, v := range e.Details {
		details[k] = v
	}
	ge.Extensions = map[string]any{"code": string(e.Code), "details": details}
	return ge
}

// untyped is a variable's value with every typed slice, at any depth of
// its lists and input objects, made a []any.
func untyped(v any) any {
	switch x := v.(type) {
	case nil:
		return nil
	case map[string]any:
		for k, e := range x {
			x[k] = untyped(e)
		}
		return x
	case []any:
		for i, e := range x {
			x[i] = untyped(e)
		}
		return x
	}
	rv := reflect.ValueOf(v)
	if rv.Kind() != reflect.Slice || rv.Type().Elem().Kind() == reflect.Uint8 { // bytes (json.RawMessage) are a value
		return v
	}
	out := make([]any, rv.Len())
	for i := range out {
		out[i] = untyped(rv.Index(i).Interface())
	}
	return out
}

// nullCondition finds a variable given as null (a nullable one, with a
// default) in the if of a @skip or @include, which takes Boolean!.
func nullCondition(sel ast.SelectionSet, vars map[string]any, seen map[string]bool) string {
	check := func(ds ast.DirectiveList) string {
		for _, d := range ds {
			if d.Name != "skip" && d.Name != "include" {
				continue
			}
			if a := d.Arguments.ForName("if"); a != nil && a.Value != nil && a.Value.Kind == ast.Variable {
				if v, ok := vars[a.Value.Raw]; ok && v == nil {
					return a.Value.Raw
				}
			}
		}
		return ""
	}
	for _, s := range sel {
		name := check(directivesOf(s))
		if name == "" {
			switch s := s.(type) {
			case *ast.Field:
				name = nullCondition(s.SelectionSet, vars, seen)
			case *ast.InlineFragment:
				name = nullCondition(s.SelectionSet, vars, seen)
			case *ast.FragmentSpread:
				if s.Definition != nil && !seen[s.Name] {
					seen[s.Name] = true
					name = nullCondition(s.Definition.SelectionSet, vars, seen)
				}
			}
		}
		if name != "" {
			return name
		}
	}
	return ""
}

// check walks v as a value of t; path names it from the variable down.
// Depth is bounded by the schema's input types, not by the value (a value
// deeper than its type was refused by the validator).
func (c *scalarVars) check(t *ast.Type, v any, path string, depth int) (string, error) {
	if v == nil || depth > 32 {
		return "", nil
	}
	if t.Elem != nil {
		list, ok := v.([]any)
		if !ok { // a single value for a list: coerced as a list of one
			return c.check(t.Elem, v, path, depth+1)
		}
		for i, e := range list {
			if p, err := c.check(t.Elem, e, path+"["+itoa(i)+"]", depth+1); err != nil {
				return p, err
			}
		}
		return "", nil
	}
	if f, ok := scalarCheck[t.NamedType]; ok {
		return path, f(v)
	}
	def := c.schema.Types[t.NamedType]
	if def == nil {
		return "", nil
	}
	switch def.Kind {
	case ast.Enum:
		// gqlparser compares an enum variable's value case-insensitively,
		// so "public" passed for PUBLIC and reached the method as its own
		// spelling; the spec takes only the value's name.
		if s, ok := v.(string); !ok || def.EnumValues.ForName(s) == nil {
			names := make([]string, len(def.EnumValues))
			for i, ev := range def.EnumValues {
				names[i] = ev.Name
			}
			return path, errs.E(errs.InvalidInput, "must be one of %s", strings.Join(names, ", "))
		}
		return "", nil
	case ast.Scalar:
		// gqlparser takes the string "1" for an Int or a Float; a number
		// is a JSON number (the decoders keep numbers as json.Number).
		if _, isString := v.(string); isString && (t.NamedType == "Int" || t.NamedType == "Float") {
			return path, errs.E(errs.InvalidInput, "must be a number, not a string")
		}
		// An ID is a string or an integer (the spec's input coercion);
		// gqlparser read a json.Number as a string, and took 5.5.
		if n, isNumber := v.(json.Number); isNumber && t.NamedType == "ID" {
			if f, ok := new(big.Float).SetString(n.String()); !ok || !f.IsInt() {
				return path, errs.E(errs.InvalidInput, "must be a string or an integer")
			}
		}
		// GraphQL's Int is 32 bits; gqlparser took 2147483648.
		if t.NamedType == "Int" && !int32Value(v) {
			return path, errs.E(errs.InvalidInput, "must be an integer from %d to %d", math.MinInt32, math.MaxInt32)
		}
		return "", nil
	}
	obj, ok := v.(map[string]any)
	if def.Kind != ast.InputObject || !ok {
		return "", nil
	}
	for _, fd := range def.Fields {
		if fv, ok := obj[fd.Name]; ok {
			if p, err := c.check(fd.Type, fv, path+"."+fd.Name, depth+1); err != nil {
				return p, err
			}
		}
	}
	return "", nil
}

// messageOf is a scalar's refusal without its code ("must be ...").
func messageOf(err error) string {
	if e, ok := errs.As(err); ok {
		return e.Message
	}
	return "is not valid"
}

// int32Value says whether an Int variable's value (as the validator left
// it: a json.Number, or a number it converted) fits GraphQL's 32 bits.
func int32Value(v any) bool {
	var i int64
	switch n := v.(type) {
	case json.Number:
		var err error
		if i, err = n.Int64(); err != nil {
			return false
		}
	case int64:
		i = n
	case int:
		i = int64(n)
	case int32:
		return true
	case float64:
		if n != math.Trunc(n) || n < math.MinInt32 || n > math.MaxInt32 {
			return false
		}
		return true
	default:
		return true // not a number: the validator's to refuse
	}
	return i >= math.MinInt32 && i <= math.MaxInt32
}
