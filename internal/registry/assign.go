package registry

import (
	"encoding"
	"encoding/json"
	"fmt"
	"reflect"
	"strings"
	"sync"
)

// assign sets dst (a method's input struct, or a part of it) from a
// validated value, without encoding it again: structs by their json tag
// names, json.RawMessage (and any json.Unmarshaler) from the bytes as sent.
func assign(dst reflect.Value, v *value) error {
	if v == nil || v.kind == kNull {
		return nil // absent: the zero value (nil for pointers)
	}
	if dst.Kind() == reflect.Pointer {
		if dst.IsNil() {
			dst.Set(reflect.New(dst.Type().Elem()))
		}
		return assign(dst.Elem(), v)
	}
	if dst.CanAddr() {
		if u, ok := dst.Addr().Interface().(json.Unmarshaler); ok {
			return u.UnmarshalJSON(v.raw)
		}
		if u, ok := dst.Addr().Interface().(encoding.TextUnmarshaler); ok && v.kind == kString {
			return u.UnmarshalText([]byte(v.str))
		}
	}
	switch dst.Kind() {
	case reflect.Slice:
		return assignSlice(dst, v)
	case reflect.Map:
		return assignMap(dst, v)
	case reflect.Struct:
		return assignStruct(dst, v)
	case reflect.Interface:
		if dst.NumMethod() != 0 {
			return mismatch(dst, v)
		}
		dst.Set(reflect.ValueOf(v.plain()))
		return nil
	}
	return assignScalar(dst, v)
}

// assignScalar sets a string, number or boolean.
func assignScalar(dst reflect.Value, v *value) error {
	switch dst.Kind() {
	case reflect.String:
		if v.kind != kString {
			return mismatch(dst, v)
		}
		dst.SetString(v.str)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		i, ok := integer(v.num)
		if v.kind != kNumber || !ok || dst.OverflowInt(i) {
			return mismatch(dst, v)
		}
		dst.SetInt(i)
	case reflect.Float32, reflect.Float64:
		f, err := v.num.Float64()
		if v.kind != kNumber || err != nil {
			return mismatch(dst, v)
		}
		dst.SetFloat(f)
	case reflect.Bool:
		if v.kind != kBool {
			return mismatch(dst, v)
		}
		dst.SetBool(v.b)
	default:
		return mismatch(dst, v)
	}
	return nil
}

func assignSlice(dst reflect.Value, v *value) error {
	if v.kind != kArray {
		return mismatch(dst, v)
	}
	s := reflect.MakeSlice(dst.Type(), len(v.vals), len(v.vals))
	for i, x := range v.vals {
		if err := assign(s.Index(i), x); err != nil {
			return err
		}
	}
	dst.Set(s)
	return nil
}

func assignMap(dst reflect.Value, v *value) error {
	if v.kind != kObject || dst.Type().Key().Kind() != reflect.String {
		return mismatch(dst, v)
	}
	m := reflect.MakeMapWithSize(dst.Type(), len(v.keys))
	for i, k := range v.keys {
		e := reflect.New(dst.Type().Elem()).Elem()
		if err := assign(e, v.vals[i]); err != nil {
			return err
		}
		m.SetMapIndex(reflect.ValueOf(k).Convert(dst.Type().Key()), e)
	}
	dst.Set(m)
	return nil
}

// assignStruct sets a struct's fields by their json names.
func assignStruct(dst reflect.Value, v *value) error {
	if v.kind != kObject {
		return mismatch(dst, v)
	}
	fields := structFields(dst.Type())
	for i, k := range v.keys {
		idx, ok := fields[k]
		if !ok {
			continue // validated already: a field the Go type does not keep
		}
		if err := assign(dst.FieldByIndex(idx), v.vals[i]); err != nil {
			return err
		}
	}
	return nil
}

func mismatch(dst reflect.Value, v *value) error {
	return fmt.Errorf("registry: cannot set %s from JSON kind %d", dst.Type(), v.kind)
}

// plain is the value as encoding/json would decode it into an any.
func (v *value) plain() any {
	switch v.kind {
	case kString:
		return v.str
	case kNumber:
		f, _ := v.num.Float64()
		return f
	case kBool:
		return v.b
	case kObject:
		m := make(map[string]any, len(v.keys))
		for i, k := range v.keys {
			m[k] = v.vals[i].plain()
		}
		return m
	case kArray:
		a := make([]any, len(v.vals))
		for i, x := range v.vals {
			a[i] = x.plain()
		}
		return a
	}
	return nil
}

var fieldCache sync.Map // reflect.Type -> map[string][]int

// structFields maps json names to field indexes, embedded structs included.
func structFields(t reflect.Type) map[string][]int {
	if m, ok := fieldCache.Load(t); ok {
		return m.(map[string][]int)
	}
	m := map[string][]int{}
	var walk func(t reflect.Type, prefix []int)
	walk = func(t reflect.Type, prefix []int) {
		for i := 0; i < t.NumField(); i++ {
			f := t.Field(i)
			idx := append(append([]int{}, prefix...), i)
			name, _, _ := strings.Cut(f.Tag.Get("json"), ",")
			if name == "-" {
				continue
			}
			// As encoding/json: an embedded struct's fields are promoted,
			// even when its type is unexported.
			if f.Anonymous && name == "" && f.Type.Kind() == reflect.Struct {
				walk(f.Type, idx)
				continue
			}
			if !f.IsExported() {
				continue
			}
			if name == "" {
				name = f.Name
			}
			if _, dup := m[name]; !dup {
				m[name] = idx
			}
		}
	}
	walk(t, nil)
	fieldCache.Store(t, m)
	return m
}
