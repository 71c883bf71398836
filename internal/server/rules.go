package server

import (
	"math/big"
	"strconv"
	"strings"

	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/validator/core"
	"github.com/vektah/gqlparser/v2/validator/rules"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonnum"
)

// validationRules are gqlparser's rules with two of this server's.
//
//   - Subscriptions have exactly one root field (the spec's "Single root
//     field"), counted by response name: gqlparser's rule counts distinct
//     field names, so `a: instanceEvents … b: instanceEvents …` passed it and
//     failed in execution as INTERNAL. Their root selections take no @skip
//     or @include (the spec's draft and graphql-js 17 refuse them: a
//     subscription whose one field is skipped streams nothing).
//   - @defer is refused: no transport here delivers incremental results
//     (an operation's result is one payload over HTTP, and one `next` per
//     event over WebSocket and SSE), and a deferred selection used to come
//     back null without an error.
func validationRules() *rules.Rules {
	r := rules.NewDefaultRules()
	r.RemoveRule(rules.SingleFieldSubscriptionsRule.Name)
	r.AddRule(singleRootField.Name, singleRootField.RuleFunc)
	r.AddRule(noDefer.Name, noDefer.RuleFunc)
	r.AddRule(int32Literals.Name, int32Literals.RuleFunc)
	r.AddRule(jsonLiterals.Name, jsonLiterals.RuleFunc)
	r.AddRule(scalarKinds.Name, scalarKinds.RuleFunc)
	return r
}

// scalarKinds refuses a literal of the wrong kind for this schema's Time
// (a string) and Long (an integer) in validation, as gqlparser refuses one
// for the built-in scalars: it skips scalars it does not know, and
// since: 5 was the scalar's refusal in execution (200, data null), where
// since: "x" and first: "x" were refused before.
var scalarKinds = core.Rule{
	Name: "ScalarKinds",
	RuleFunc: func(observers *core.Events, addError core.AddErrFunc) {
		observers.OnValue(func(walker *core.Walker, value *ast.Value) {
			if value.Definition == nil {
				return
			}
			switch {
			case value.Kind == ast.Variable, value.Kind == ast.NullValue:
				return
			case value.Kind == ast.ListValue && value.ExpectedType != nil && value.ExpectedType.Elem != nil:
				return // a list where one goes: its items are judged ([[5]] was three errors)
			}
			switch value.Definition.Name {
			case "Time":
				if value.Kind != ast.StringValue && value.Kind != ast.BlockValue {
					addError(core.Message(`Time cannot represent a non string value: %s`, errs.Cut(value.String())), core.At(value.Position))
				}
			case "Long":
				if value.Kind != ast.IntValue {
					addError(core.Message(`Long cannot represent a non integer value: %s`, errs.Cut(value.String())), core.At(value.Position))
				}
			}
		})
	},
}

// jsonLiterals holds the numbers written in a JSON argument of the
// document to what the same value in a variable is held to: at most
// jsonnum.MaxDigits digits written out in full, and kept exactly.
// gqlparser reads a literal into an int64 or a float64, so
// 123456789012345678.5 was stored as 123456789012345680, 1e-400 as 0, and
// an integer past 64 bits was refused in general words; a variable keeps
// every digit (json.Number).
var jsonLiterals = core.Rule{
	Name: "JSONLiterals",
	RuleFunc: func(observers *core.Events, addError core.AddErrFunc) {
		observers.OnValue(func(walker *core.Walker, value *ast.Value) {
			if value.Definition == nil || value.Definition.Name != "JSON" {
				return // the values inside one are walked from it
			}
			var walk func(at string, v *ast.Value)
			walk = func(at string, v *ast.Value) {
				where := "the JSON value's number"
				if at != "" {
					where = "the number at " + at + " of the JSON value"
				}
				switch v.Kind {
				case ast.ObjectValue:
					for _, c := range v.Children {
						p := c.Name
						if at != "" {
							p = at + "." + c.Name
						}
						walk(p, c.Value)
					}
				case ast.ListValue:
					for i, c := range v.Children {
						walk(at+"["+strconv.Itoa(i)+"]", c.Value)
					}
				case ast.Variable:
					// A Float variable is coerced to a 64-bit float before
					// it is put in the value: 9007199254740993 was stored
					// as 9007199254740992 (a helper's probe).
					if d := v.VariableDefinition; d != nil && d.Type != nil && d.Type.Name() == "Float" {
						addError(core.Message(`%s is the Float variable $%s, which does not keep every number: declare it JSON.`, strings.Replace(where, "'s number", "", 1), v.Raw),
							core.At(v.Position))
					}
				case ast.IntValue, ast.FloatValue:
					if !jsonnum.Bounded(v.Raw) {
						addError(core.Message(`%s has more than %d digits written out in full.`, where, jsonnum.MaxDigits), core.At(v.Position))
						return
					}
					if _, err := strconv.ParseInt(v.Raw, 10, 64); v.Kind == ast.IntValue && err == nil {
						return
					}
					// Kept exactly: the float's shortest decimal (what is
					// stored) is the number written (0.1 is; 1e-400 and
					// 123456789012345678.5 are not).
					f, err := strconv.ParseFloat(v.Raw, 64)
					exact, ok := new(big.Rat).SetString(v.Raw)
					stored, _ := new(big.Rat).SetString(strconv.FormatFloat(f, 'g', -1, 64))
					if err != nil || !ok || stored == nil || stored.Cmp(exact) != 0 {
						addError(core.Message(`%s (%s) is not kept exactly when written in the document (it reads as a 64-bit float, %s): pass the value in a variable.`, where, v.Raw, strconv.FormatFloat(f, 'g', -1, 64)),
							core.At(v.Position))
					}
				}
			}
			walk("", value)
		})
	},
}

// int32Literals refuses an Int literal outside 32 bits, as the spec's
// Int scalar does (gqlparser's rule only refused one past 64 bits, so
// first: 2147483648 reached the resolver, where the same number in a
// variable is refused by its coercion).
var int32Literals = core.Rule{
	Name: "Int32Literals",
	RuleFunc: func(observers *core.Events, addError core.AddErrFunc) {
		observers.OnValue(func(walker *core.Walker, value *ast.Value) {
			if value.Kind != ast.IntValue || value.Definition == nil || value.Definition.Name != "Int" {
				return
			}
			if _, err := strconv.ParseInt(value.Raw, 10, 64); err != nil {
				return // past 64 bits: refused before validation (outOfRangeNumber)
			}
			if _, err := strconv.ParseInt(value.Raw, 10, 32); err != nil {
				addError(core.Message(`Int cannot represent non 32-bit signed integer value: %s`, value.Raw), core.At(value.Position))
			}
		})
	},
}

var singleRootField = core.Rule{
	Name: "SingleRootFieldSubscriptions",
	RuleFunc: func(observers *core.Events, addError core.AddErrFunc) {
		observers.OnOperation(func(walker *core.Walker, op *ast.OperationDefinition) {
			if op.Operation != ast.Subscription {
				return
			}
			name := "Anonymous Subscription"
			if op.Name != "" {
				name = "Subscription " + strconv.Quote(op.Name)
			}
			var fields []*ast.Field
			keys := map[string]bool{}
			spread := map[string]bool{}
			var walk func(set ast.SelectionSet)
			walk = func(set ast.SelectionSet) {
				for _, sel := range set {
					for _, d := range directivesOf(sel) {
						if d.Name == "skip" || d.Name == "include" {
							addError(core.Message(`%s must not use @%s in its top level selection: a subscription has exactly one root field.`, name, d.Name),
								core.At(d.Position))
						}
					}
					switch s := sel.(type) {
					case *ast.Field:
						if strings.HasPrefix(s.Name, "__") {
							addError(core.Message(`%s must not select an introspection top level field.`, name), core.At(s.Position))
						}
						key := responseName(s)
						if !keys[key] {
							keys[key] = true
							fields = append(fields, s)
						}
					case *ast.InlineFragment:
						walk(s.SelectionSet)
					case *ast.FragmentSpread:
						if s.Definition != nil && !spread[s.Name] {
							spread[s.Name] = true
							walk(s.Definition.SelectionSet)
						}
					}
				}
			}
			walk(op.SelectionSet)
			if len(fields) > 1 {
				addError(core.Message(`%s must select only one top level field.`, name), core.At(fields[1].Position))
			}
		})
	},
}

var noDefer = core.Rule{
	Name: "NoDefer",
	RuleFunc: func(observers *core.Events, addError core.AddErrFunc) {
		observers.OnDirective(func(walker *core.Walker, d *ast.Directive) {
			if d.Name == "defer" {
				addError(core.Message(`@defer is not supported: this server delivers an operation's result as one payload on every transport; remove @defer.`),
					core.At(d.Position))
			}
		})
	},
}
