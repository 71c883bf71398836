// Package errs is the one error vocabulary of the product. Both the method
// surface and GraphQL map these codes: HTTP statuses come from one table here,
// GraphQL puts the code in errors[].extensions.code.
package errs

import (
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Code is a contract error code.
type Code string

const (
	InvalidInput     Code = "INVALID_INPUT"
	Unauthenticated  Code = "UNAUTHENTICATED"
	PermissionDenied Code = "PERMISSION_DENIED"
	NotFound         Code = "NOT_FOUND"
	Conflict         Code = "CONFLICT"
	InvalidState     Code = "INVALID_STATE"
	PayloadTooLarge  Code = "PAYLOAD_TOO_LARGE"
	RateLimited      Code = "RATE_LIMITED"
	Unavailable      Code = "UNAVAILABLE"
	Internal         Code = "INTERNAL"

	// The HTTP layer's codes, answered before any method or operation runs
	// (Transport).
	MethodNotAllowed     Code = "METHOD_NOT_ALLOWED"
	UnsupportedMediaType Code = "UNSUPPORTED_MEDIA_TYPE"
)

// statuses is the single table mapping codes to HTTP statuses (contract section 4).
var statuses = map[Code]int{
	InvalidInput:     http.StatusBadRequest,
	Unauthenticated:  http.StatusUnauthorized,
	PermissionDenied: http.StatusForbidden,
	NotFound:         http.StatusNotFound,
	Conflict:         http.StatusConflict,
	InvalidState:     http.StatusUnprocessableEntity,
	PayloadTooLarge:  http.StatusRequestEntityTooLarge,
	RateLimited:      http.StatusTooManyRequests,
	Unavailable:      http.StatusServiceUnavailable,
	Internal:         http.StatusInternalServerError,

	MethodNotAllowed:     http.StatusMethodNotAllowed,
	UnsupportedMediaType: http.StatusUnsupportedMediaType,
}

// Info is one row of the error table: the code, its HTTP status, when it
// happens and what a client should do. docs/api/errors.md and the OpenAPI
// document's error responses are rendered from Table.
type Info struct {
	Code   Code
	Status int
	When   string
	Do     string
}

// Table lists every code in the contract's order.
func Table() []Info {
	return withStatus([]Info{
		{InvalidInput, 0, "the input fails the method's schema or a documented rule; `details.path` names the first offending field (`document.steps[2].use`)",
			"Do not retry the same request: fix the field `details.path` names. `profiles.render` also puts the profile's problems in `details.issues`."},
		{Unauthenticated, 0, "no bearer token, or one that is unknown or revoked; for `nodes.join`, a join token that is unknown, revoked, expired or used up. The answer carries `WWW-Authenticate: Bearer realm=\"compute\"` (RFC 6750)",
			"Do not retry with the same credential: get a new token (or join token) and retry."},
		{PermissionDenied, 0, "the decision said no: the caller holds no role on the tenant it names (whether or not that tenant exists), or a role without the permission",
			"Do not retry: ask a tenant admin for a role that grants the permission the method page names."},
		{NotFound, 0, "no such resource visible to the caller (another tenant's node, a pool not offered to it, a private profile); also an unknown group or method",
			"Do not retry: check the id and the tenant. A resource the caller may not see is indistinguishable from one that does not exist."},
		{Conflict, 0, "it already exists, or `expectedVersion` does not match the resource's `rowVersion`",
			"On an `expectedVersion` mismatch, read the resource again, reapply the change to what you read and retry with its `rowVersion`. On a duplicate, read the existing resource or pick another id."},
		{InvalidState, 0, "the resource's state forbids the change (a used profile version's document, a join to an archived pool)",
			"Do not retry as is: change the resource's state first, or act on another resource (create the next profile version)."},
		{PayloadTooLarge, 0, "the body is over the method's limit (1 MiB unless the method page says otherwise)",
			"Send less: split the request. Retrying the same body fails again."},
		{RateLimited, 0, "the caller's credential (or, without one, its address) is over its request budget, shared by every replica (a GraphQL operation spends one request per 1000 units of its cost: `details.charge`); its address is over the failed-authentication budget; the credential holds `COMPUTE_SESSIONS_PER_CREDENTIAL` sockets and streams on this replica (`details.reason: \"sessions\"`); or a join token holds its bound of open TPM challenges or pending join requests (`details.reason`: `open-challenges`, `pending-requests`)",
			"Wait the number of seconds the `Retry-After` header gives (also `details.retryAfterSeconds` where the refusal knows it), then retry; spread requests out."},
		{Unavailable, 0, "the database is unreachable or busy (a statement or lock timeout, no free connection), or the request ran past its deadline",
			"Retry with exponential backoff and jitter (for example 0.2 s doubling to 30 s). Reads are safe to retry; a mutation may have been applied, so read before repeating a create."},
		{Internal, 0, "a bug; the message says nothing of internals and `details.requestId` names the server's log line",
			"Retry once at most, then report `details.requestId` (it is also the response's `X-Request-Id`)."},
	})
}

// Transport lists the codes of the HTTP layer: answered for how a request
// was sent, before any method or GraphQL operation runs, so no method page
// lists them.
func Transport() []Info {
	return withStatus([]Info{
		{MethodNotAllowed, 0, "a method path asked with another HTTP method than `POST`; `/graphql` asked with another than `GET` or `POST`, or a mutation sent with `GET` (the `Allow` header lists what the path takes)",
			"Do not retry as is: send the request with a method the `Allow` header lists."},
		{UnsupportedMediaType, 0, "a body sent in a content coding (`Content-Encoding` other than `identity`, e.g. `gzip`), on a method path or GraphQL's (the answer's `Accept-Encoding: identity` says none is taken); a GraphQL request (`POST /graphql`, `POST /graphql/stream`) whose `Content-Type` is not one header of `application/json`, with no charset or `utf-8`",
			"Do not retry as is: send the body uncompressed, as `application/json` in UTF-8."},
	})
}

// OnEveryBody are the codes of Transport that a method's POST itself can
// be answered (its body's coding), declared on every method's operation of
// the OpenAPI document.
var OnEveryBody = []Code{UnsupportedMediaType}

// withStatus fills in the rows' statuses from the one table of them.
func withStatus(rows []Info) []Info {
	for i := range rows {
		rows[i].Status = statuses[rows[i].Code]
	}
	return rows
}

// Known reports a code of Table or Transport.
func Known(c Code) bool {
	_, ok := statuses[c]
	return ok
}

// HTTPStatus returns the status for a code.
func (c Code) HTTPStatus() int {
	if s, ok := statuses[c]; ok {
		return s
	}
	return http.StatusInternalServerError
}

// Error is a domain error: a code, a message safe for clients and details.
type Error struct {
	Code    Code           `json:"code"`
	Message string         `json:"message"`
	Details map[string]any `json:"details"`
}

func (e *Error) Error() string { return string(e.Code) + ": " + e.Message }

// E builds an error with a formatted message.
func E(code Code, format string, args ...any) *Error {
	return &Error{Code: code, Message: fmt.Sprintf(format, args...), Details: map[string]any{}}
}

// Within is the detail of an error of a value's part that does not know
// where the value is (a GraphQL scalar's refusal): the part's place inside
// it ("x.a[1]"). The graph's presenter joins it to the value's path and
// never answers it.
const Within = "within"

// JoinPath is the path of the part within of the value at base.
func JoinPath(base, within string) string {
	switch {
	case base == "":
		return within
	case within == "":
		return base
	case strings.HasPrefix(within, "["):
		return base + within
	}
	return base + "." + within
}

// With returns a copy of e with one more detail.
func (e *Error) With(key string, value any) *Error {
	d := make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		d[k] = v
	}
	d[key] = value
	return &Error{Code: e.Code, Message: e.Message, Details: d}
}

// Quoted is the most of a client's own text (a key, a name) an error
// quotes; Cut cuts to it.
const Quoted = 64

// Cut is s as an error quotes a client's own text (an unknown key in a
// path or a message, a name of a GraphQL document): at most Quoted
// characters, then "…". An answer must not carry the request back (a
// 100 KB key came back whole, twice).
func Cut(s string) string {
	if len(s) <= Quoted {
		return s
	}
	n := 0
	for i := range s {
		if n == Quoted {
			return s[:i] + "…"
		}
		n++
	}
	return s
}

// CutText is an answer's message or path with every run of more than
// 2×Quoted characters without a space cut as Cut cuts it: the last guard of
// both surfaces (Public, the graph's presenter) for the client's own text
// that a message quotes whole (a value gqlparser names, a key a document's
// validator puts in its path), whatever made the message. Runs of the
// server's own words (a pattern, a path of declared fields) are shorter.
// And the whole is at most MaxMessage characters, "…" included: text of
// words with spaces passed the first cut whole (a label value, a value a
// schema error quoted, an input object gqlparser wrote out: 100 KB answers).
func CutText(s string) string {
	if len(s) <= 2*Quoted {
		return s
	}
	// A quoted value is a client's text: at most a quote of it, spaces or
	// not (a value of words came back at the whole bound).
	s = quoted.ReplaceAllStringFunc(s, func(q string) string {
		if utf8.RuneCountInString(q) <= Quoted+2 {
			return q
		}
		return `"` + Cut(q[1:len(q)-1]) + `"`
	})
	words := strings.Split(s, " ")
	cut := false
	for i, w := range words {
		if len(w) > 2*Quoted && utf8.RuneCountInString(w) > 2*Quoted {
			words[i], cut = Cut(w), true
		}
	}
	if cut {
		s = strings.Join(words, " ")
	}
	if len(s) > MaxMessage && utf8.RuneCountInString(s) > MaxMessage {
		s = string([]rune(s)[:MaxMessage-1]) + "…"
	}
	return s
}

// quoted is a double-quoted run of a message (Go's %q, gqlparser's
// quotes), escapes included.
var quoted = regexp.MustCompile(`"(?:[^"\\]|\\.)*"`)

// CutPath is a path as an answer names it: each of its parts a quote at
// most (a key of the client's words, in an unknown field's path), then
// CutText.
func CutPath(p string) string {
	if len(p) <= Quoted {
		return p
	}
	parts := strings.Split(p, ".")
	for i, part := range parts {
		parts[i] = Cut(part)
	}
	// And the whole at most maxPath: a key of dotted words has short
	// parts (495 characters of one came back, in the message and the
	// path). The server's own paths are far shorter.
	c := strings.Join(parts, ".")
	if utf8.RuneCountInString(c) > maxPath {
		c = string([]rune(c)[:maxPath-1]) + "…"
	}
	return CutText(c)
}

// CutMessage is an answer's message whose details.path is path: every part
// of the path longer than a quote is cut as CutPath cuts it wherever the
// message repeats it (a message begins with the path it refuses, and a
// path holds the client's keys: "policy.capacity.<key>: unknown field"
// came back with 512 characters of the key), then CutText.
func CutMessage(msg, path string) string {
	if len(path) > Quoted {
		if c := CutPath(path); c != path {
			msg = strings.ReplaceAll(msg, path, c) // the path as details.path has it
		}
		for _, part := range strings.Split(path, ".") {
			if c := Cut(part); c != part {
				msg = strings.ReplaceAll(msg, part, c)
			}
		}
	}
	return CutText(msg)
}

// maxPath bounds a path as an answer names it, a few characters under
// CutText's longest word, so that a message's "<path>:" is not cut again
// (it lost its colon and the half of the path details.path kept).
const maxPath = 2*Quoted - 4

// MaxMessage bounds an answer's message and path, in characters: eight
// quotes' worth, past every message of the server's own.
const MaxMessage = 8 * Quoted

// InState is INVALID_STATE for a resource whose state forbids the change:
// details.state and details.reason both name the state (an archived pool,
// a canceled reservation), the one shape every such refusal has.
func InState(state, format string, args ...any) *Error {
	return E(InvalidState, format, args...).With("state", state).With("reason", state)
}

// Invalid is INVALID_INPUT naming the offending field in details.path.
func Invalid(path, format string, args ...any) *Error {
	return E(InvalidInput, format, args...).With("path", path)
}

// As extracts a domain error; ok is false for any other error.
func As(err error) (*Error, bool) {
	var e *Error
	if errors.As(err, &e) {
		return e, true
	}
	return nil, false
}

// CodeOf returns the code of err, Internal when it is not a domain error.
func CodeOf(err error) Code {
	if e, ok := As(err); ok {
		return e.Code
	}
	return Internal
}

// cutQuotes is e with its message and details.path cut by CutText (a copy
// when anything is cut).
func cutQuotes(e *Error) *Error {
	path, isPath := e.Details["path"].(string)
	msg := CutMessage(e.Message, path)
	if msg == e.Message && (!isPath || CutPath(path) == path) {
		return e
	}
	out := &Error{Code: e.Code, Message: msg, Details: make(map[string]any, len(e.Details))}
	for k, v := range e.Details {
		out.Details[k] = v
	}
	if isPath {
		out.Details["path"] = CutPath(path)
	}
	return out
}

// Public turns any error into what a client may see: domain errors pass,
// anything else becomes INTERNAL naming only the request id.
func Public(err error, requestID string) *Error {
	if e, ok := As(err); ok {
		if e.Details == nil {
			e.Details = map[string]any{}
		}
		if e.Code == Internal {
			return E(Internal, "internal error").With("requestId", requestID)
		}
		return cutQuotes(e)
	}
	return E(Internal, "internal error").With("requestId", requestID)
}

// RetryAfterSeconds is what a RATE_LIMITED answer's Retry-After header
// says: its details.retryAfterSeconds when a refusal knows how long to
// wait, else 1 (a refusal that frees at a client's own act, a session
// closed, has no better figure). Every 429 carries the header, as the
// code's table tells clients to wait for it.
func RetryAfterSeconds(details map[string]any) int {
	if s, ok := details["retryAfterSeconds"].(int); ok && s >= 1 {
		return s
	}
	return 1
}

// SetHeaders sets the headers an error answer of the status carries, on
// both surfaces: a 429's Retry-After (RetryAfterSeconds of its details),
// a 401's WWW-Authenticate (RFC 6750: the bearer scheme the request must
// use). A header already set is kept.
func SetHeaders(h http.Header, status int, details map[string]any) {
	switch status {
	case http.StatusTooManyRequests:
		if h.Get("Retry-After") == "" {
			h.Set("Retry-After", strconv.Itoa(RetryAfterSeconds(details)))
		}
	case http.StatusUnauthorized:
		if h.Get("WWW-Authenticate") == "" {
			h.Set("WWW-Authenticate", `Bearer realm="compute"`)
		}
	}
}
