// Package jsonkeys finds a JSON document's repeated object keys.
//
// encoding/json keeps the last of two equal keys; another reader of the
// same bytes (a proxy, a log, a client library) may keep the first. The
// method surface's decoder refuses a repeated key (registry); the GraphQL
// transports decode with encoding/json and ask Duplicate first, so both
// surfaces read one document one way. LoneSurrogate finds the other thing
// encoding/json reads silently otherwise: an escape that is no Unicode
// character.
package jsonkeys

import (
	"bytes"
	"encoding/json"
	"strconv"
	"strings"
)

// Duplicate returns the path of the first key that an object of the
// document repeats ("variables.input.name"; keys compared after unescaping,
// as encoding/json compares them) and true, or "" and false. Ask it of a
// document that decoded: of one that is not JSON it reports what it read
// before the error.
func Duplicate(doc []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(doc))
	dec.UseNumber()
	type frame struct {
		keys    map[string]struct{} // nil for an array
		wantKey bool
		key     string // the key whose value is being read
		index   int    // an array's next element
	}
	var stack []*frame
	// done marks the end of a value in the frame that holds it.
	done := func() {
		if len(stack) == 0 {
			return
		}
		f := stack[len(stack)-1]
		if f.keys != nil {
			f.wantKey = true
		} else {
			f.index++
		}
	}
	where := func() string {
		var b strings.Builder
		for _, f := range stack {
			if f.keys != nil {
				if b.Len() > 0 {
					b.WriteByte('.')
				}
				b.WriteString(f.key)
			} else {
				b.WriteString("[" + strconv.Itoa(f.index) + "]")
			}
		}
		return b.String()
	}
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		var top *frame
		if len(stack) > 0 {
			top = stack[len(stack)-1]
		}
		if top != nil && top.keys != nil && top.wantKey {
			if d, ok := tok.(json.Delim); ok && d == '}' {
				stack = stack[:len(stack)-1]
				done()
				continue
			}
			k, _ := tok.(string)
			top.key = k
			if _, seen := top.keys[k]; seen {
				return where(), true
			}
			top.keys[k] = struct{}{}
			top.wantKey = false
			continue
		}
		switch t := tok.(type) {
		case json.Delim:
			switch t {
			case '{':
				stack = append(stack, &frame{keys: map[string]struct{}{}, wantKey: true})
			case '[':
				stack = append(stack, &frame{})
			default: // ']' (a '}' ends an object while it wants a key)
				stack = stack[:len(stack)-1]
				done()
			}
		default:
			done()
		}
		if len(stack) == 0 && !dec.More() {
			return "", false
		}
	}
}

// LoneSurrogate reports whether a JSON document escapes a UTF-16 surrogate
// that is not half of a pair ("\ud800" alone, or "\udc00" first):
// encoding/json reads it as U+FFFD, a character the client did not send,
// and stores it. Ask it of a document that is valid UTF-8; of one that is
// not JSON it reports what it read.
func LoneSurrogate(doc []byte) bool {
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		if !inString {
			inString = c == '"'
			continue
		}
		switch c {
		case '"':
			inString = false
		case '\\':
			if i+1 < len(doc) && doc[i+1] != 'u' {
				i++ // a one-character escape
				continue
			}
			r, ok := hex4(doc, i+2)
			if !ok {
				continue // not JSON: the decoder refuses it
			}
			i += 5 // the escape's last digit
			switch {
			case r >= 0xdc00 && r <= 0xdfff:
				return true
			case r >= 0xd800 && r <= 0xdbff:
				if i+2 < len(doc) && doc[i+1] == '\\' && doc[i+2] == 'u' {
					if lo, ok := hex4(doc, i+3); ok && lo >= 0xdc00 && lo <= 0xdfff {
						i += 6
						continue
					}
				}
				return true
			}
		}
	}
	return false
}

// NestsDeeper reports whether a JSON document opens more than limit
// objects and arrays inside one another somewhere; of a document that is
// not JSON it reports what it read. encoding/json refuses a document
// nested past 10000 levels as a syntax error, a fault the document need
// not have: ask this first, to say why.
func NestsDeeper(doc []byte, limit int) bool {
	depth := 0
	return untilOutsideStrings(doc, func(c byte) bool {
		switch c {
		case '{', '[':
			depth++
			return depth > limit
		case '}', ']':
			depth--
		}
		return false
	})
}

// HoldsMore reports whether a JSON document holds more than limit values:
// it counts each object and array, and each item or member after the first
// of one (its commas), outside strings, so that a caller can bound the work
// of decoding a document before it starts (decoded into Go values, a 1 MiB
// array of 490,000 numbers cost 370 ms of CPU here). A document's values
// are at most what it counts plus one.
func HoldsMore(doc []byte, limit int) bool {
	n := 0
	return untilOutsideStrings(doc, func(c byte) bool {
		if c == '{' || c == '[' || c == ',' {
			n++
			return n > limit
		}
		return false
	})
}

// untilOutsideStrings calls stop with each byte of doc outside its strings
// (quotes and escapes skipped), until stop returns true; it reports whether
// one did.
func untilOutsideStrings(doc []byte, stop func(c byte) bool) bool {
	inString := false
	for i := 0; i < len(doc); i++ {
		c := doc[i]
		switch {
		case inString && c == '\\':
			i++
		case c == '"':
			inString = !inString
		case inString:
		case stop(c):
			return true
		}
	}
	return false
}

// hex4 reads the four hex digits at doc[at:].
func hex4(doc []byte, at int) (rune, bool) {
	if at+4 > len(doc) {
		return 0, false
	}
	var r rune
	for _, c := range doc[at : at+4] {
		r <<= 4
		switch {
		case c >= '0' && c <= '9':
			r |= rune(c - '0')
		case c >= 'a' && c <= 'f':
			r |= rune(c - 'a' + 10)
		case c >= 'A' && c <= 'F':
			r |= rune(c - 'A' + 10)
		default:
			return 0, false
		}
	}
	return r, true
}
