// Package page holds the keyset pagination helpers: limits and opaque
// cursors. A cursor encodes the sort key of the last item returned; the query
// behind it always re-applies the caller's visibility, so a forged cursor
// can only move within what the caller may read anyway.
package page

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"math"
	"reflect"
	"strconv"
	"unicode/utf8"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/pattern"
)

// Page sizes, once: a page is DefaultLimit items unless the caller asks
// for 1 to MaxLimit, on the method surface (limit) and in the graph
// (first). A seed page may set other bounds for its method (inventory
// history), stated where that method is defined.
const (
	DefaultLimit = 50
	MaxLimit     = 200
)

// MaxCursor is the longest cursor, in characters, any list or stream
// reads: a method's cursor, a connection's after, a subscription's after,
// an event stream's Last-Event-ID.
const MaxCursor = 256

// CheckCursorLength refuses a cursor longer than MaxCursor, at path, in
// the method surface's words.
func CheckCursorLength(path, cursor string) error {
	if len(cursor) > MaxCursor && utf8.RuneCountInString(cursor) > MaxCursor {
		return errs.Invalid(path, "%s is longer than %d characters", path, MaxCursor)
	}
	return nil
}

// Page is the method surface's page: items and the next cursor (nil at the end).
type Page[T any] struct {
	Items  []T     `json:"items" doc:"The page's items, in the list's order."`
	Cursor *string `json:"cursor" doc:"Pass it as cursor to read the next page; null on the last page."`
}

// Kind names what a list's items are ("pool", "instance"): a cursor
// carries its list's kind, and a list refuses another kind's cursor (it
// answered an empty page: a pool id sorts where no instance id does). The
// graph's connection and the method of the same items share a kind, so
// their cursors are one.
type Kind string

// keyPatterns are the patterns of kinds' string key parts, by kind
// (Keyed), set while packages initialise and read-only after.
var keyPatterns = map[Kind][]*pattern.Regexp{}

// Keyed declares kind k whose key parts match patterns, in key order (""
// for a part of any value; an integer part is matched as its decimal): Decode refuses a cursor of k
// whose part does not (a hand-made ["joinRequest", "x' OR 1=1 --"] was
// read as a place in the list and answered an empty page, where a
// cursor this server never wrote is INVALID_INPUT). Declare each kind once,
// at package level.
func Keyed(k Kind, patterns ...string) Kind {
	if _, ok := keyPatterns[k]; ok {
		panic("page: kind " + string(k) + " declared twice")
	}
	res := make([]*pattern.Regexp, len(patterns))
	for i, p := range patterns {
		if p != "" {
			res[i] = pattern.MustCompile(p)
		}
	}
	keyPatterns[k] = res
	return k
}

// Codec makes and reads a list's cursors: a Kind's, or Verbatim's.
type Codec interface {
	Encode(key ...any) string
	Decode(cursor string, dst ...any) (bool, error)
}

// Verbatim is the codec of a list whose cursor is its last item's id, as a
// seed fixes it (inventory.history's snapshot id, an instance's event id):
// Encode is the id itself, and Decode takes a cursor matching the id's
// pattern into its one string key. The graph's connection of such a list
// uses it, so that the method's cursors and the connection's are one.
type Verbatim struct{ re *pattern.Regexp }

// VerbatimOf is the Verbatim codec of ids matching src.
func VerbatimOf(src string) Verbatim { return Verbatim{pattern.MustCompile(src)} }

// Encode returns the key, an id.
func (v Verbatim) Encode(key ...any) string { return key[0].(string) }

// Decode checks an id given as a cursor and stores it in dst[0] (a
// *string).
func (v Verbatim) Decode(cursor string, dst ...any) (bool, error) {
	if cursor == "" {
		return false, nil
	}
	if !v.re.MatchString(cursor) {
		return false, errs.Invalid("cursor", "cursor is not one this server returned")
	}
	*dst[0].(*string) = cursor
	return true, nil
}

// Encode makes an opaque cursor of a list of kind k from a sort key.
func (k Kind) Encode(key ...any) string {
	b, _ := json.Marshal(append([]any{string(k)}, key...))
	return base64.RawURLEncoding.EncodeToString(b)
}

// Decode reads a cursor made by k.Encode into dst (pointers, in key
// order). An empty cursor leaves dst alone and returns false.
func (k Kind) Decode(cursor string, dst ...any) (bool, error) {
	if cursor == "" {
		return false, nil
	}
	bad := errs.Invalid("cursor", "cursor is not one this server returned")
	b, err := base64.RawURLEncoding.DecodeString(cursor)
	if err != nil || base64.RawURLEncoding.EncodeToString(b) != cursor { // the decoder skips CR and LF
		return false, bad
	}
	var parts []json.RawMessage
	if err := json.Unmarshal(b, &parts); err != nil || len(parts) == 0 {
		return false, bad
	}
	var kind string
	if json.Unmarshal(parts[0], &kind) != nil {
		return false, bad
	}
	if kind != string(k) {
		return false, errs.Invalid("cursor", "cursor is one of another list")
	}
	parts = parts[1:]
	if len(parts) != len(dst) {
		return false, bad
	}
	vals := make([]any, len(dst))
	for i, p := range parts {
		if err := json.Unmarshal(p, dst[i]); err != nil {
			return false, bad
		}
		vals[i] = reflect.ValueOf(dst[i]).Elem().Interface()
		// No key this server writes has an empty part (an item's id, a
		// version, a time): ["audit", ""] read as the first page.
		if s, ok := vals[i].(string); ok && s == "" {
			return false, bad
		}
		if pats := keyPatterns[k]; i < len(pats) && pats[i] != nil {
			text, ok := vals[i].(string)
			switch n := vals[i].(type) {
			case int:
				text, ok = strconv.Itoa(n), true // a version: its decimal
			case int64:
				text, ok = strconv.FormatInt(n, 10), true
			}
			if !ok || !pats[i].MatchString(text) {
				return false, bad
			}
		}
		// An int part is a key of an integer column (a profile's version):
		// one that column cannot hold is not one this server returned (a
		// forged 2147483648 reached the statement, which failed as an
		// INTERNAL error). A key of a bigint column decodes into int64.
		if n, ok := vals[i].(int); ok && (n < math.MinInt32 || n > math.MaxInt32) {
			return false, bad
		}
	}
	// One this server returned is Encode's of what it holds: a part of
	// null (which left its key empty: the first page again), a number
	// spelled 1e2 or a key of text PostgreSQL cannot hold (\u0000: the
	// query failed as a broken constraint) is not.
	if k.Encode(vals...) != cursor || bytes.Contains(b, []byte(`\u0000`)) {
		return false, bad
	}
	return true, nil
}

// Trim cuts rows fetched with LIMIT n+1 to n and returns the cursor of the
// last kept row (nil when there is no further page).
func Trim[T any](rows []T, limit int, key func(T) string) ([]T, *string) {
	if rows == nil {
		rows = []T{}
	}
	if len(rows) <= limit {
		return rows, nil
	}
	rows = rows[:limit]
	c := key(rows[len(rows)-1])
	return rows, &c
}

// Conn is one parent's page of a connection, as the loaders return it.
type Conn[T any] struct {
	Items   []T
	Total   int
	HasNext bool
}

// Rows is what a batched page query returns: for each item, its parent and
// the parent's total count. Parents with no row on this page are counted by
// the caller's count function.
type Rows[T any] struct {
	Parents []string
	Totals  []int
	Items   []T
}

// Parents is the FROM item of a batched page statement's parents, named
// t(parent), and its argument: unnest($1::text[]) for several parents, a
// scalar $1 for one. PostgreSQL plans a statement over an array parameter
// anew on every execution (a generic plan cannot know the array's length,
// so it never looks as cheap as a custom one), about 0.25 ms for a page
// statement; over a scalar it switches to one plan per connection after a
// few executions. One parent is the common case of a root connection
// (tenant(tenantId:) { pools }).
func Parents(ids []string) (from string, arg any) {
	if len(ids) == 1 {
		return `(SELECT $1::text AS parent) AS t`, ids[0]
	}
	return `unnest($1::text[]) AS t(parent)`, ids
}

// Group turns batched rows (fetched with LIMIT limit+1 per parent) into
// per-parent pages.
func Group[T any](r Rows[T], limit int) map[string]*Conn[T] {
	// Each parent's items are allocated once at their final size (2000
	// nodes of 50 pools were otherwise copied 7 times while growing).
	counts := map[string]int{}
	for _, p := range r.Parents {
		counts[p]++
	}
	out := make(map[string]*Conn[T], len(counts))
	for i, p := range r.Parents {
		c := out[p]
		if c == nil {
			c = &Conn[T]{Total: r.Totals[i], Items: make([]T, 0, min(counts[p], limit))}
			out[p] = c
		}
		if len(c.Items) == limit {
			c.HasNext = true
			continue
		}
		c.Items = append(c.Items, r.Items[i])
	}
	return out
}
