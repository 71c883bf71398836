package registry

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"unicode/utf8"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonkeys"
	"github.com/bettercompute/computed/internal/pgtext"
)

// The typed validator checks a method's input that arrives as its Go type
// (a GraphQL resolver's, through Call) against the method's fields: the
// rules the body decoder applies to a request body (decode.go), with the
// same messages and paths (stringProblem, integerProblem), and the same
// defaults. Free-form parts (open objects, Any fields, json.RawMessage
// values) are encoded once and read by the body decoder itself, so the
// limits on depth, NUL characters and keys are literally the same code.
//
// A Go value has no "absent" of its own: a nil pointer, slice, map,
// interface or json.RawMessage is absent, and so is the zero value of an
// optional field (the body decoder fills a Go zero value for an absent
// field too). A required field of a non-pointer type is always present,
// so "" is checked against its pattern as a body's "" would be.

// validateTyped checks in (a pointer to a method's input struct) against
// fields, filling in defaults where a field is absent.
func validateTyped(fields []Field, in any) error {
	rv := reflect.ValueOf(in)
	if rv.Kind() != reflect.Pointer || rv.IsNil() || rv.Elem().Kind() != reflect.Struct {
		return fmt.Errorf("registry: input %T is not a pointer to a struct", in)
	}
	w := &walker{}
	return w.object(fields, rv.Elem(), 0)
}

type walker struct {
	path []pathSeg
}

func (w *walker) invalid(format string, args ...any) error {
	p := pathText(w.path)
	return errs.Invalid(p, strings.ReplaceAll(format, "%p", p), args...)
}

// object checks a struct's declared fields: those present first, in
// declared order (a body's are checked in document order), then the
// required ones, and fills in defaults (decoder.complete).
func (w *walker) object(fields []Field, sv reflect.Value, level int) error {
	if level > maxDepth {
		return w.invalid("the body nests deeper than %d levels", maxDepth)
	}
	idx := structFields(sv.Type())
	for i := range fields {
		f := &fields[i]
		fv := fieldByIndex(sv, idx[f.Name])
		if absent(f, fv) {
			continue
		}
		w.path = append(w.path, pathSeg{key: f.Name, index: -1})
		if err := w.value(f, fv, level+1); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	for i := range fields {
		f := &fields[i]
		fv := fieldByIndex(sv, idx[f.Name])
		if !absent(f, fv) {
			continue
		}
		if f.Required {
			w.path = append(w.path, pathSeg{key: f.Name, index: -1})
			return w.invalid("%s is required", f.Name)
		}
		if fv.IsValid() {
			fv.SetZero() // an explicit null (json.RawMessage "null") means absent
			if f.Default != nil {
				if err := assign(fv, defaultValue(f)); err != nil {
					return err
				}
			}
		}
	}
	return nil
}

// value checks one present value against its field.
func (w *walker) value(f *Field, fv reflect.Value, level int) error {
	for fv.Kind() == reflect.Pointer {
		fv = fv.Elem()
	}
	if freeForm(f, fv.Type()) {
		return w.document(f, fv, level)
	}
	switch f.Type {
	case Object:
		return w.object(f.Fields, fv, level)
	case Array:
		return w.array(f, fv, level)
	case String:
		s, err := stringOf(fv)
		if err != nil {
			return err
		}
		if !utf8.ValidString(s) {
			return w.invalid("%p is not valid UTF-8")
		}
		if pgtext.HasNUL(s) {
			return w.invalid("%p must not contain NUL characters")
		}
		if msg, args := stringProblem(f, s); msg != "" {
			return w.invalid(msg, args...)
		}
	case Integer:
		var i int64
		switch fv.Kind() {
		case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
			u := fv.Uint()
			if u > uint64(*f.Max) {
				return w.invalid("%p must be in %s", rangeText(f))
			}
			i = int64(u)
		default:
			i = fv.Int()
		}
		if msg, args := integerProblem(f, i); msg != "" {
			return w.invalid(msg, args...)
		}
	}
	return nil
}

func (w *walker) array(f *Field, fv reflect.Value, level int) error {
	if level > maxDepth {
		return w.invalid("the body nests deeper than %d levels", maxDepth)
	}
	n := fv.Len()
	for i := 0; i < n; i++ {
		if f.MaxItems > 0 && i >= f.MaxItems {
			return w.invalid("%p has more than %d items", f.MaxItems)
		}
		item := fv.Index(i)
		if absent(&Field{Required: true}, item) {
			continue // a null item: the body decoder lets it through as well
		}
		itemField := f.Items
		if itemField == nil {
			itemField = &Field{Type: Any}
		}
		w.path = append(w.path, pathSeg{index: i})
		if err := w.value(itemField, item, level+1); err != nil {
			return err
		}
		w.path = w.path[:len(w.path)-1]
	}
	if n < f.MinItems {
		return w.invalid("%p needs at least %d items", f.MinItems)
	}
	return nil
}

// document checks a free-form value with the body decoder: its JSON as
// stored (json.RawMessage) or as encoding/json writes it.
func (w *walker) document(f *Field, fv reflect.Value, level int) error {
	var raw []byte
	if r, ok := fv.Interface().(json.RawMessage); ok {
		raw = r
	} else {
		var err error
		if raw, err = json.Marshal(fv.Interface()); err != nil {
			return w.invalid("%p cannot be encoded as JSON")
		}
	}
	if !utf8.Valid(raw) {
		return w.invalid("%p is not valid UTF-8")
	}
	if jsonkeys.LoneSurrogate(raw) {
		return w.invalid("%p holds an escaped UTF-16 surrogate without its pair (one of \\ud800-\\udfff alone): not a Unicode character")
	}
	if !json.Valid(raw) {
		return w.invalid("%p is not valid JSON")
	}
	d := &decoder{buf: raw, path: append([]pathSeg(nil), w.path...)}
	_, err := d.value(f, level)
	return err
}

var (
	rawMessageType    = reflect.TypeFor[json.RawMessage]()
	jsonMarshalerType = reflect.TypeFor[json.Marshaler]()
	textMarshalerType = reflect.TypeFor[encoding.TextMarshaler]()
)

// freeForm says a value is checked as a JSON document: a field that takes
// anything or an open object, and any Go value that writes its own JSON
// (other than a string field's text).
func freeForm(f *Field, t reflect.Type) bool {
	switch {
	case f.Type == Any || f.Type == Object && f.Open:
		return true
	case t == rawMessageType || t.Kind() == reflect.Interface:
		return true
	case f.Type == String:
		return false
	}
	return t.Implements(jsonMarshalerType) || reflect.PointerTo(t).Implements(jsonMarshalerType)
}

// stringOf is a string field's Go value as text.
func stringOf(fv reflect.Value) (string, error) {
	if fv.Kind() == reflect.String {
		return fv.String(), nil
	}
	if m, ok := fv.Interface().(encoding.TextMarshaler); ok {
		b, err := m.MarshalText()
		return string(b), err
	}
	return "", fmt.Errorf("registry: a string field holds %s", fv.Type())
}

// absent says a field has no value (see the comment at the top).
func absent(f *Field, fv reflect.Value) bool {
	if !fv.IsValid() {
		return true
	}
	switch fv.Kind() {
	case reflect.Pointer, reflect.Interface, reflect.Map:
		return fv.IsNil()
	case reflect.Slice:
		if fv.IsNil() {
			return true
		}
		if fv.Type() == rawMessageType {
			s := strings.TrimSpace(string(fv.Bytes()))
			return s == "" || s == "null"
		}
	}
	return !f.Required && fv.IsZero()
}

// fieldByIndex is reflect's FieldByIndex that returns the zero Value where
// the path goes through a nil embedded pointer.
func fieldByIndex(v reflect.Value, index []int) reflect.Value {
	if index == nil {
		return reflect.Value{}
	}
	for i, x := range index {
		if i > 0 && v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}
			}
			v = v.Elem()
		}
		v = v.Field(x)
	}
	return v
}

// defaultValue is a field's default as a decoded value.
func defaultValue(f *Field) *value {
	raw, _ := json.Marshal(f.Default)
	dv, _ := (&decoder{buf: raw}).value(nil, 0)
	return dv
}

// checkInputType stops the server at start-up when a method's fields and
// its Go input type disagree: a declared field the type does not keep, or
// a field whose Go type cannot hold the declared JSON type.
func checkInputType(key string, fields []Field, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		panic(fmt.Sprintf("registry: %s: input type %s is not a struct", key, t))
	}
	idx := structFields(t)
	for i := range fields {
		f := &fields[i]
		x, ok := idx[f.Name]
		if !ok {
			panic(fmt.Sprintf("registry: %s: field %s is not in the input type %s", key, f.Name, t))
		}
		checkFieldType(key+"."+f.Name, f, t.FieldByIndex(x).Type)
	}
}

func checkFieldType(where string, f *Field, t reflect.Type) {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if freeForm(f, t) {
		return
	}
	ok := true
	switch f.Type {
	case Object:
		if ok = t.Kind() == reflect.Struct; ok {
			checkInputType(where, f.Fields, t)
		}
	case Array:
		if ok = t.Kind() == reflect.Slice; ok && f.Items != nil {
			checkFieldType(where+"[]", f.Items, t.Elem())
		}
	case String:
		ok = t.Kind() == reflect.String || t.Implements(textMarshalerType)
	case Integer:
		switch t.Kind() {
		case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
			reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		default:
			ok = false
		}
	case Boolean:
		ok = t.Kind() == reflect.Bool
		if ok && f.Default == true {
			panic(fmt.Sprintf("registry: %s defaults to true: give it a pointer type, or false could not be passed", where))
		}
	}
	if !ok {
		panic(fmt.Sprintf("registry: %s is %s but its Go type is %s", where, f.Type, t))
	}
}
