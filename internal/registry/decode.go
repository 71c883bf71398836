package registry

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonkeys"
	"github.com/bettercompute/computed/internal/jsonnum"
	"github.com/bettercompute/computed/internal/pgtext"
)

// A body is decoded once, by one pass that follows the method's fields: it
// checks every constraint as it reaches the value, so the first offending
// field is the first in the document as sent; it keeps objects' keys in
// document order and every value's bytes as sent, so the open fields (a
// profile document, an inventory report) reach the domain exactly as the
// client wrote them; and it refuses duplicate keys, NUL characters and
// anything after the object.

// kind is a JSON value's type.
type kind byte

const (
	kNull kind = iota
	kString
	kNumber
	kBool
	kObject
	kArray
)

// value is a decoded JSON value.
type value struct {
	kind kind
	str  string      // kString
	num  json.Number // kNumber
	b    bool        // kBool
	keys []string    // kObject, in document order
	vals []*value    // kObject values (parallel to keys) and kArray items
	raw  []byte      // the value's bytes as sent (a sub-slice of the body)
}

// get returns an object's member, nil when absent.
func (v *value) get(key string) *value {
	if v == nil || v.kind != kObject {
		return nil
	}
	for i, k := range v.keys {
		if k == key {
			return v.vals[i]
		}
	}
	return nil
}

// maxDepth bounds the nesting of any request body.
const maxDepth = MaxDepth

// MaxDepth is how deep a method's input may nest: its body object is the
// first level. The graph's variables are bound by it too (a mutation's
// input is a method's body one level down).
const MaxDepth = 32

// decode parses and validates a body against a method's fields.
func decode(raw []byte, fields []Field) (*value, error) {
	return decodeAs(raw, &Field{Type: Object, Fields: fields})
}

func decodeAs(raw []byte, top *Field) (*value, error) {
	if !utf8.Valid(raw) {
		// encoding/json would silently turn invalid UTF-8 into U+FFFD, and a
		// hashed document (an inventory report) would then not be what was sent.
		return nil, errs.Invalid("", "the body is not valid UTF-8")
	}
	// The same, escaped: encoding/json reads it as U+FFFD. The decoder
	// names the string or key that holds it.
	lone := jsonkeys.LoneSurrogate(raw)
	if !json.Valid(raw) {
		// encoding/json refuses nesting past 10000 levels as a syntax error;
		// this decoder stops at maxDepth with the path where it went over.
		// Where it stops first for another reason (an unknown field, a top
		// level that is not an object), the depth is still the answer: the
		// body is refused for it whatever else it holds, and a syntax error
		// at offset 10001 would name a fault it does not have.
		if jsonkeys.NestsDeeper(raw, maxDepth+1) {
			if err := deepError(raw, top); err != nil {
				return nil, err
			}
			return nil, errs.Invalid("", "the body nests deeper than %d levels", maxDepth)
		}
		return nil, syntaxError(raw)
	}
	d := &decoder{buf: raw, lone: lone}
	d.space()
	if d.peek() != '{' { // null too: the contract's body is a JSON object
		if lone {
			return nil, errLoneSurrogate("")
		}
		return nil, errs.Invalid("", "the body must be a JSON object")
	}
	v, err := d.value(top, 0)
	if err == nil && lone {
		return nil, errLoneSurrogate("") // where the decoder did not read (none)
	}
	return v, err
}

// errLoneSurrogate refuses a string or key escaping half a surrogate pair.
func errLoneSurrogate(path string) error {
	return errs.Invalid(path, "%s holds an escaped UTF-16 surrogate without its pair (one of \\ud800-\\udfff alone): not a Unicode character", cmp.Or(path, "the body"))
}

// deepError runs the decoder over a body that is not valid JSON but nests
// too deep, for the depth error and its path; nil when the decoder meets
// the broken part first (it assumes valid JSON, so that ends in a panic or
// another error, both of which the caller reports as a syntax error).
func deepError(raw []byte, top *Field) (err error) {
	defer func() {
		if recover() != nil {
			err = nil
		}
	}()
	d := &decoder{buf: raw}
	_, err = d.value(top, 0)
	if e, ok := errs.As(err); ok && strings.Contains(e.Message, "nests deeper") {
		return err
	}
	return nil
}

// syntaxError reports where a body stops being JSON (only on the error
// path: json.Valid says whether, not where).
func syntaxError(raw []byte) error {
	dec := json.NewDecoder(bytes.NewReader(raw))
	var v any
	err := dec.Decode(&v)
	if err == nil {
		// One value, then something else.
		return errs.Invalid("", "the body must be one JSON object with nothing after it")
	}
	if se, ok := err.(*json.SyntaxError); ok {
		return errs.Invalid("", "the body is not valid JSON: syntax error at offset %d", se.Offset)
	}
	return errs.Invalid("", "the body is not valid JSON")
}

// decoder walks a body json.Valid has accepted.
type decoder struct {
	buf  []byte
	pos  int
	path []pathSeg
	lone bool // the body escapes a lone surrogate somewhere (jsonkeys.LoneSurrogate)
	// loneHere: the last token read escapes one
	loneHere bool
}

type pathSeg struct {
	key   string
	index int // -1 for a key
}

func (d *decoder) pathString() string { return pathText(d.path) }

// pathText renders a path as error details carry it: a.b[2].c.
func pathText(path []pathSeg) string {
	var b strings.Builder
	for _, s := range path {
		if s.index < 0 {
			if b.Len() > 0 {
				b.WriteByte('.')
			}
			b.WriteString(s.key)
		} else {
			fmt.Fprintf(&b, "[%d]", s.index)
		}
	}
	return b.String()
}

func (d *decoder) invalid(format string, args ...any) error {
	p := d.pathString()
	return errs.Invalid(p, strings.ReplaceAll(format, "%p", p), args...)
}

func (d *decoder) peek() byte {
	if d.pos < len(d.buf) {
		return d.buf[d.pos]
	}
	return 0
}

func (d *decoder) space() {
	for d.pos < len(d.buf) {
		switch d.buf[d.pos] {
		case ' ', '\t', '\n', '\r':
			d.pos++
		default:
			return
		}
	}
}

// value reads the value at the decoder's position and checks it against f
// (nil: anything, as inside an open object).
func (d *decoder) value(f *Field, level int) (*value, error) {
	if level > maxDepth {
		return nil, d.invalid("the body nests deeper than %d levels", maxDepth)
	}
	d.space()
	start := d.pos
	var v *value
	var err error
	switch c := d.peek(); {
	case c == '{':
		v, err = d.object(f, level)
	case c == '[':
		v, err = d.array(f, level)
	case c == '"':
		var s string
		s, err = d.string()
		v = &value{kind: kString, str: s}
	case c == 't':
		d.pos += 4
		v = &value{kind: kBool, b: true}
	case c == 'f':
		d.pos += 5
		v = &value{kind: kBool}
	case c == 'n':
		d.pos += 4
		v = &value{kind: kNull}
	default:
		for d.pos < len(d.buf) && strings.IndexByte("+-0123456789.eE", d.buf[d.pos]) >= 0 {
			d.pos++
		}
		v = &value{kind: kNumber, num: json.Number(d.buf[start:d.pos])}
		if (f == nil || f.Type == Any) && !jsonnum.Bounded(string(v.num)) {
			// Free-form content is stored as sent (jsonb) and written out
			// in full on every read: its numbers are bounded here, for
			// every method.
			return nil, d.invalid("%p has more than %d digits written out in full", jsonnum.MaxDigits)
		}
	}
	if err != nil {
		return nil, err
	}
	v.raw = d.buf[start:d.pos]
	if f == nil || v.kind == kObject || v.kind == kArray {
		return v, nil // containers were checked as they were read
	}
	return v, d.check(f, v)
}

// string reads a string token, refusing NUL characters (PostgreSQL text
// and jsonb cannot hold them).
func (d *decoder) string() (string, error) {
	s := d.token()
	if d.loneHere {
		return "", errLoneSurrogate(d.pathString())
	}
	if pgtext.HasNUL(s) {
		return "", d.invalid("%p must not contain NUL characters")
	}
	return s, nil
}

// token reads a string token.
func (d *decoder) token() string {
	start := d.pos
	d.pos++
	escaped := false
	for {
		c := d.buf[d.pos]
		if c == '\\' {
			escaped = true
			d.pos += 2
			continue
		}
		d.pos++
		if c == '"' {
			break
		}
	}
	var s string
	d.loneHere = escaped && d.lone && jsonkeys.LoneSurrogate(d.buf[start:d.pos])
	if escaped {
		_ = json.Unmarshal(d.buf[start:d.pos], &s)
	} else {
		s = string(d.buf[start+1 : d.pos-1])
	}
	return s
}

func (d *decoder) object(f *Field, level int) (*value, error) {
	if f != nil && f.Type != Object && f.Type != Any {
		return nil, d.typeError(f)
	}
	var known []Field
	open := f == nil || f.Type == Any || f.Open
	if !open {
		known = f.Fields
	}
	v := &value{kind: kObject}
	d.pos++ // {
	for {
		d.space()
		if d.peek() == '}' {
			d.pos++
			break
		}
		if d.peek() == ',' {
			d.pos++
			d.space()
		}
		k := d.token()
		if d.loneHere {
			if len(d.path) == 0 {
				return nil, errLoneSurrogate("")
			}
			return nil, errs.Invalid(d.pathString(), "the keys of %s hold an escaped UTF-16 surrogate without its pair (one of \\ud800-\\udfff alone): not a Unicode character", d.pathString())
		}
		if pgtext.HasNUL(k) {
			if len(d.path) == 0 {
				return nil, d.invalid("the body's keys must not contain NUL characters")
			}
			return nil, d.invalid("the keys of %p must not contain NUL characters")
		}
		d.path = append(d.path, pathSeg{key: k, index: -1})
		if containsKey(v.keys, k) {
			return nil, d.invalid("duplicate key %q", k)
		}
		var cf *Field
		if !open {
			if cf = fieldNamed(known, k); cf == nil {
				return nil, d.invalid("unknown field %q", k)
			}
		}
		d.space()
		d.pos++ // :
		cv, err := d.value(cf, level+1)
		if err != nil {
			return nil, err
		}
		d.path = d.path[:len(d.path)-1]
		v.keys, v.vals = append(v.keys, k), append(v.vals, cv)
	}
	if !open {
		if err := d.complete(known, v); err != nil {
			return nil, err
		}
	}
	return v, nil
}

// complete checks the required fields after the object, in declared order,
// and fills in defaults; an explicit null means absent.
func (d *decoder) complete(fields []Field, v *value) error {
	for i := range fields {
		f := &fields[i]
		cv := v.get(f.Name)
		if cv != nil && cv.kind != kNull {
			continue
		}
		if f.Required {
			d.path = append(d.path, pathSeg{key: f.Name, index: -1})
			err := d.invalid("%s is required", f.Name)
			d.path = d.path[:len(d.path)-1]
			return err
		}
		if cv != nil {
			v.remove(f.Name)
		}
		if f.Default != nil {
			raw, _ := json.Marshal(f.Default)
			dv, _ := (&decoder{buf: raw}).value(nil, 0)
			v.keys, v.vals = append(v.keys, f.Name), append(v.vals, dv)
		}
	}
	return nil
}

func (v *value) remove(key string) {
	for i, k := range v.keys {
		if k == key {
			v.keys = append(v.keys[:i:i], v.keys[i+1:]...)
			v.vals = append(v.vals[:i:i], v.vals[i+1:]...)
			return
		}
	}
}

func (d *decoder) array(f *Field, level int) (*value, error) {
	if f != nil && f.Type != Array && f.Type != Any {
		return nil, d.typeError(f)
	}
	var item *Field
	if f != nil && f.Type == Array {
		item = f.Items
	}
	v := &value{kind: kArray}
	d.pos++ // [
	for i := 0; ; i++ {
		d.space()
		if d.peek() == ']' {
			d.pos++
			break
		}
		if d.peek() == ',' {
			d.pos++
		}
		if f != nil && f.MaxItems > 0 && i >= f.MaxItems {
			return nil, d.invalid("%p has more than %d items", f.MaxItems)
		}
		d.path = append(d.path, pathSeg{index: i})
		before := d.pos
		cv, err := d.value(item, level+1)
		if err == nil && d.pos == before {
			panic("registry: the decoder did not advance") // only on bodies json.Valid refused
		}
		if err != nil {
			return nil, err
		}
		// A null item is no item: refused as its type's (a field's null
		// means the field left out, which an item cannot be; assigned, it
		// was the zero value, and a null MAC was stored as "" past the
		// pattern an item must match).
		if cv.kind == kNull && item != nil && item.Type != Any {
			return nil, d.typeError(item)
		}
		d.path = d.path[:len(d.path)-1]
		v.vals = append(v.vals, cv)
	}
	if f != nil && len(v.vals) < f.MinItems {
		return nil, d.invalid("%p needs at least %d items", f.MinItems)
	}
	return v, nil
}

func (d *decoder) typeError(f *Field) error {
	switch f.Type {
	case Object:
		return d.invalid("%p must be an object")
	case Array:
		return d.invalid("%p must be an array")
	case Integer:
		return d.invalid("%p must be an integer")
	case Boolean:
		return d.invalid("%p must be a boolean")
	}
	return d.invalid("%p must be a %s", f.Type)
}

// check validates a scalar against its field.
func (d *decoder) check(f *Field, v *value) error {
	if v.kind == kNull {
		return nil // complete() decides about absent fields
	}
	switch f.Type {
	case Any:
		return nil
	case String:
		if v.kind != kString {
			return d.typeError(f)
		}
		if msg, args := stringProblem(f, v.str); msg != "" {
			return d.invalid(msg, args...)
		}
	case Integer:
		if v.kind != kNumber {
			return d.typeError(f)
		}
		i, ok := integer(v.num)
		if !ok {
			return d.typeError(f)
		}
		if msg, args := integerProblem(f, i); msg != "" {
			return d.invalid(msg, args...)
		}
		v.num = json.Number(strconv.FormatInt(i, 10))
	case Boolean:
		if v.kind != kBool {
			return d.typeError(f)
		}
	default:
		return d.typeError(f)
	}
	return nil
}

// The rules of a string and of an integer field, shared by the body
// decoder and the typed validator (typed.go) so both say the same thing:
// a message whose %p stands for the field's path, and its arguments; ""
// when the value passes.

func stringProblem(f *Field, s string) (string, []any) {
	switch {
	case f.MaxLength > 0 && utf8.RuneCountInString(s) > f.MaxLength:
		return "%p is longer than %d characters", []any{f.MaxLength}
	case len(f.Enum) > 0 && !contains(f.Enum, s):
		return "%p must be one of %s", []any{strings.Join(f.Enum, ", ")}
	case f.re != nil && !f.re.MatchString(s):
		return "%p does not match %s", []any{f.Pattern}
	}
	return "", nil
}

func integerProblem(f *Field, i int64) (string, []any) {
	if i < *f.Min || i > *f.Max {
		return "%p must be in %s", []any{rangeText(f)}
	}
	return "", nil
}

// integer reads a JSON number that is an integer (1, 1.0, 1e3), exactly
// (jsonnum.Int): 1.0000000000000000000001 is not one (float64 read it as
// 1). One past int64 (2^63, 1e400) reads as the int64 bound on its side:
// it is past every field's range, and is refused for that ("must be in
// 1-200", not "must be an integer").
func integer(n json.Number) (int64, bool) {
	return jsonnum.Int(string(n))
}

func fieldNamed(fields []Field, name string) *Field {
	for i := range fields {
		if fields[i].Name == name {
			return &fields[i]
		}
	}
	return nil
}

func containsKey(keys []string, k string) bool {
	for _, x := range keys {
		if x == k {
			return true
		}
	}
	return false
}
