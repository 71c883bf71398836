package server

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"mime"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"unicode/utf8"

	"github.com/99designs/gqlgen/graphql"
	"github.com/vektah/gqlparser/v2/ast"
	"github.com/vektah/gqlparser/v2/gqlerror"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/jsonkeys"
	"github.com/bettercompute/computed/internal/jsonnum"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
)

// GraphQL over HTTP (the GraphQL-over-HTTP spec): POST with an
// application/json body, GET for queries. The request is decoded here, not
// by gqlgen's transports, whose errors name Go types and echo the body.

const (
	mediaJSON         = "application/json"
	mediaGraphQLJSON  = "application/graphql-response+json"
	allowGraphQLVerbs = "GET, POST"
)

// allowMethods answers 405 for verbs GraphQL over HTTP does not use, before
// gqlgen looks for a transport.
func allowMethods(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case isWebSocketUpgrade(r), r.Method == http.MethodGet, r.Method == http.MethodPost:
			next.ServeHTTP(w, r)
		case r.Method == http.MethodOptions:
			w.Header().Set("Allow", allowGraphQLVerbs+", OPTIONS")
			w.WriteHeader(http.StatusNoContent)
		default:
			w.Header().Set("Allow", allowGraphQLVerbs)
			writeRequestError(w, mediaJSON, http.StatusMethodNotAllowed,
				errs.E(errs.MethodNotAllowed, "GraphQL over HTTP takes GET (queries) and POST"))
		}
	})
}

// httpTransport serves GET and POST.
type httpTransport struct{}

var _ graphql.Transport = httpTransport{}

func (httpTransport) Supports(r *http.Request) bool {
	return !isWebSocketUpgrade(r) && r.URL.Path != StreamPath && (r.Method == http.MethodGet || r.Method == http.MethodPost)
}

func (httpTransport) Do(w http.ResponseWriter, r *http.Request, exec graphql.GraphExecutor) {
	ctx := r.Context()
	ct := responseType(r)
	defer answerPanic(ctx, w, ct, exec)
	start := graphql.Now()
	var params *graphql.RawParams
	var perr *errs.Error
	if r.Method == http.MethodGet {
		params, perr = paramsFromQuery(r.URL.RawQuery)
	} else {
		if e := jsonBody(r); e != nil {
			writeRequestError(w, ct, http.StatusUnsupportedMediaType, e)
			return
		}
		body, err := io.ReadAll(r.Body)
		if err != nil {
			writeRequestError(w, ct, http.StatusBadRequest, errs.E(errs.InvalidInput, "could not read the body"))
			return
		}
		params, perr = DecodeParams(body)
	}
	if perr != nil {
		writeRequestError(w, ct, http.StatusBadRequest, perr)
		return
	}
	params.Headers = r.Header
	params.ReadTime = graphql.TraceTiming{Start: start, End: graphql.Now()}

	oc, list := exec.CreateOperationContext(ctx, params)
	list = capErrors(list)
	if list != nil {
		resp := exec.DispatchError(graphql.WithOperationContext(ctx, oc), list)
		writeResponse(w, ct, requestErrorStatus(ct, resp.Errors), resp)
		return
	}
	if refusedGetMutation(w, r, ct, oc) {
		return
	}
	switch oc.Operation.Operation {
	case ast.Subscription:
		// A request error, answered as the others are: 400 under
		// application/graphql-response+json, 200 under application/json
		// (it was 400 under both, the one refusal out of line).
		writeRequestError(w, ct, requestErrorStatus(ct, nil), errs.E(errs.InvalidInput,
			"subscriptions run over WebSocket (graphql-transport-ws) at /graphql or Server-Sent Events at /graphql/stream"))
		return
	}
	responses, rctx := exec.DispatchOperation(ctx, oc)
	writeResponse(w, ct, http.StatusOK, responses(rctx))
}

// answerPanic answers a panic that escaped the executor (gqlgen recovers
// resolvers' own; one in parsing, validation or an extension reached its
// handler, which wrote the error with no Content-Type, read as text/plain)
// as every answer is written: 500 INTERNAL in the GraphQL error shape, as
// the recover function presents it (logged with the request id). An
// answer already under way is left as it is.
func answerPanic(ctx context.Context, w http.ResponseWriter, ct string, exec graphql.GraphExecutor) {
	v := recover()
	if v == nil {
		return
	}
	if w.Header().Get("Content-Length") != "" {
		panic(v) // the answer has started: net/http ends the connection
	}
	var ge *gqlerror.Error
	if p, ok := exec.(interface {
		PresentRecoveredError(context.Context, any) error
	}); ok {
		ge, _ = p.PresentRecoveredError(ctx, v).(*gqlerror.Error)
	}
	if ge == nil {
		ge = &gqlerror.Error{Message: "internal error", Extensions: map[string]any{"code": string(errs.Internal),
			"details": map[string]any{"requestId": reqctx.RequestID(ctx)}}}
	}
	writeResponse(w, ct, http.StatusInternalServerError, &graphql.Response{Errors: gqlerror.List{ge}})
}

// refusedGetMutation answers 405 to a mutation sent with GET, on every
// transport that takes GET (/graphql, /graphql/stream): GET is safe, and a
// link, a prefetch or a crawler must not change anything (GraphQL over
// HTTP). The mutation has not run.
func refusedGetMutation(w http.ResponseWriter, r *http.Request, ct string, oc *graphql.OperationContext) bool {
	if r.Method != http.MethodGet || oc == nil || oc.Operation == nil || oc.Operation.Operation != ast.Mutation {
		return false
	}
	w.Header().Set("Allow", http.MethodPost)
	writeRequestError(w, ct, http.StatusMethodNotAllowed, errs.E(errs.MethodNotAllowed, "mutations take POST; GET is for queries"))
	return true
}

// jsonBody checks that a POST's body is declared as JSON in UTF-8: one
// Content-Type, application/json, with no charset or utf-8. A second
// Content-Type was ignored (the first won, where a proxy may read the
// other), and a body declared as UTF-16 or Latin-1 was read as UTF-8.
func jsonBody(r *http.Request) *errs.Error {
	refused := errs.E(errs.UnsupportedMediaType, "send the request as %s (UTF-8), with one Content-Type header", mediaJSON)
	values := r.Header.Values("Content-Type")
	if len(values) != 1 {
		return refused
	}
	mt, params, err := mime.ParseMediaType(values[0])
	if err != nil || mt != mediaJSON {
		return refused
	}
	// UTF-8 by any of its usual names, or ASCII, which is UTF-8.
	if cs, ok := params["charset"]; ok {
		switch strings.ToLower(cs) {
		case "utf-8", "utf8", "us-ascii":
		default:
			return refused
		}
	}
	return nil
}

// maxVariablesDepth bounds the nesting of variables (and extensions): the
// object is the first level, and a mutation's input, the method's body, is
// the second, which may nest as deep as the method surface lets a body
// (registry.MaxDepth). maxBodyDepth bounds the whole body (and a socket's
// message) before anything is decoded. Deeper values were decoded, copied and walked before a resolver
// refused them: a viewer's 20 KB body of 10000 levels cost up to 2 s of
// CPU, and 16 at once took both cores for 13 s and 1.1 GB of memory.
//
// maxVariableValues bounds how many values variables (and extensions) hold,
// counted on the bytes too (jsonkeys.HoldsMore: objects, arrays, and items
// or members after the first): within the body's 1 MiB a flat array of
// 490,000 numbers cost 370 ms of CPU to decode and check for duplicate
// keys, and 16 at once held both cores for 12 s. The graph's largest
// inputs, profile documents of at most 128 KiB, hold a few thousand.
const (
	maxVariablesDepth = registry.MaxDepth + 1
	maxBodyDepth      = 2 * maxVariablesDepth // loose: the keys' own bounds say which one went past
	maxVariableValues = 20000
	maxBodyValues     = 2*maxVariableValues + 16 // variables, extensions and the body's own members
)

// DecodeParams decodes a POST body: one JSON object with query (a string),
// and optional operationName (a string), variables and extensions
// (objects). Nothing may follow the object. Errors name the offending key,
// never a Go type, and never echo the body.
func DecodeParams(body []byte) (*graphql.RawParams, *errs.Error) {
	if !utf8.Valid(body) {
		return nil, errs.Invalid("", "the body is not valid UTF-8")
	}
	if jsonkeys.LoneSurrogate(body) {
		return nil, errs.Invalid("", "the body holds an escaped UTF-16 surrogate without its pair (one of \\ud800-\\udfff alone): not a Unicode character")
	}
	if jsonkeys.NestsDeeper(body, maxBodyDepth) {
		return nil, errs.Invalid("", "the body nests deeper than %d levels (variables: %d)", maxBodyDepth, maxVariablesDepth)
	}
	if jsonkeys.HoldsMore(body, maxBodyValues) {
		return nil, errs.Invalid("", "the body holds more than %d values (variables: %d)", maxBodyValues, maxVariableValues)
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	dec.UseNumber()
	var raw map[string]json.RawMessage
	if err := dec.Decode(&raw); err != nil || raw == nil {
		return nil, errs.Invalid("", "the body must be a JSON object with a query")
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		return nil, errs.Invalid("", "the body holds more than one JSON value")
	}
	if err := noDuplicate(body, ""); err != nil {
		return nil, err
	}
	p := &graphql.RawParams{}
	q, ok := raw["query"]
	if !ok || isNull(q) {
		return nil, missingQuery(raw["extensions"])
	}
	if json.Unmarshal(q, &p.Query) != nil {
		return nil, errs.Invalid("query", "query must be a string")
	}
	if v, ok := raw["operationName"]; ok && !isNull(v) {
		if json.Unmarshal(v, &p.OperationName) != nil {
			return nil, errs.Invalid("operationName", "operationName must be a string")
		}
	}
	var err *errs.Error
	if p.Variables, err = object(raw, "variables"); err != nil {
		return nil, err
	}
	// An integral number in any spelling is an integer, as GraphQL's Int
	// coercion and the method surface take it (gqlparser refused 1e3 for
	// an Int).
	jsonnum.Integral(p.Variables)
	if p.Extensions, err = object(raw, "extensions"); err != nil {
		return nil, err
	}
	return p, nil
}

// missingQuery is the answer to a request without a query. Apollo's
// automatic persisted queries send a query's hash alone first; this server
// keeps no persisted queries (a cache per replica would miss behind a load
// balancer) and says so in the words those clients look for, so they send
// the whole query from then on.
func missingQuery(extensions json.RawMessage) *errs.Error {
	var m map[string]json.RawMessage
	if json.Unmarshal(extensions, &m) == nil && m["persistedQuery"] != nil {
		return errs.E(errs.InvalidInput, "PersistedQueryNotSupported").With("path", "query").With("reason", "persisted-queries-not-supported")
	}
	return errs.Invalid("query", "query is required")
}

func isNull(b json.RawMessage) bool { return string(bytes.TrimSpace(b)) == "null" }

func object(raw map[string]json.RawMessage, key string) (map[string]any, *errs.Error) {
	v, ok := raw[key]
	if !ok || isNull(v) {
		return nil, nil
	}
	if jsonkeys.NestsDeeper(v, maxVariablesDepth) {
		return nil, errs.Invalid(key, "%s nests deeper than %d levels", key, maxVariablesDepth)
	}
	if jsonkeys.HoldsMore(v, maxVariableValues) {
		return nil, errs.Invalid(key, "%s hold more than %d values", key, maxVariableValues)
	}
	dec := json.NewDecoder(bytes.NewReader(v))
	dec.UseNumber()
	var m map[string]any
	if dec.Decode(&m) != nil || m == nil {
		return nil, errs.Invalid(key, "%s must be an object", key)
	}
	return m, nil
}

// noDuplicate refuses a document (decoded already) that repeats a key in
// one of its objects: encoding/json would keep the last, where another
// reader of the same bytes may keep the first (the method surface refuses
// it too). The path is under prefix, cut to 100 bytes.
func noDuplicate(doc []byte, prefix string) *errs.Error {
	path, dup := jsonkeys.Duplicate(doc)
	if !dup {
		return nil
	}
	if prefix != "" {
		path = prefix + "." + path
	}
	path = truncate(path, 100)
	return errs.Invalid(path, "the key %s appears twice", path)
}

// paramsFromQuery reads a GET request's parameters.
func paramsFromQuery(rawQuery string) (*graphql.RawParams, *errs.Error) {
	q, err := url.ParseQuery(rawQuery)
	if err != nil {
		return nil, errs.Invalid("", "the query string does not parse")
	}
	for _, key := range []string{"query", "operationName", "variables", "extensions"} {
		if len(q[key]) > 1 {
			// url.Values.Get keeps the first, where another reader of the
			// URL may keep the last (as for a key twice in a body).
			return nil, errs.Invalid(key, "the parameter %s appears twice", key)
		}
	}
	p := &graphql.RawParams{Query: q.Get("query"), OperationName: q.Get("operationName")}
	if p.Query == "" {
		return nil, missingQuery(json.RawMessage(q.Get("extensions")))
	}
	for _, key := range []string{"variables", "extensions"} {
		s := q.Get(key)
		if s == "" {
			continue
		}
		m, e := object(map[string]json.RawMessage{key: json.RawMessage(s)}, key)
		if e != nil {
			return nil, e
		}
		// A POST body is checked whole (DecodeParams); a GET's objects
		// one by one.
		if e := noDuplicate([]byte(s), key); e != nil {
			return nil, e
		}
		if key == "variables" {
			p.Variables = m
		} else {
			p.Extensions = m
		}
	}
	return p, nil
}

// responseType negotiates the response media type as the spec says:
// application/graphql-response+json unless the client prefers
// application/json (or accepts anything, for legacy clients). Each type
// takes the q-value of the most specific range that names it (RFC 9110,
// 12.5.1); the higher wins, then the one named by the more specific range,
// then the one named first. A type refused with q=0 is never chosen; when
// the client accepts neither, the answer is the spec's type anyway.
func responseType(r *http.Request) string {
	accept := r.Header.Get("Accept")
	if accept == "" {
		return mediaJSON
	}
	type pick struct {
		q           float64
		specificity int // 3 the type itself, 2 application/*, 1 */*, 0 unnamed
		at          int // the position of the range that decided it
	}
	var best [2]pick
	alts := [2]string{mediaJSON, mediaGraphQLJSON}
	for at, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil {
			continue
		}
		q := 1.0
		if v, ok := params["q"]; ok {
			if q, err = strconv.ParseFloat(v, 64); err != nil || q < 0 || q > 1 {
				continue
			}
		}
		for i, alt := range alts {
			spec := 0
			switch mt {
			case alt:
				spec = 3
			case "application/*":
				spec = 2
			case "*/*":
				spec = 1
			}
			if spec > best[i].specificity {
				best[i] = pick{q, spec, at}
			}
		}
	}
	j, g := best[0], best[1]
	switch {
	case j.q <= 0 && g.q <= 0:
		return mediaGraphQLJSON
	case j.q != g.q:
		if j.q > g.q {
			return mediaJSON
		}
		return mediaGraphQLJSON
	case j.specificity != g.specificity:
		if j.specificity > g.specificity {
			return mediaJSON
		}
		return mediaGraphQLJSON
	case j.at <= g.at:
		return mediaJSON // named first, or both by one range (*/*: legacy clients)
	}
	return mediaGraphQLJSON
}

// requestErrorStatus is the status of a request that did not execute: 429
// when over the budget; otherwise 400 under application/graphql-response+json
// and 200 under application/json, as the spec says.
func requestErrorStatus(ct string, list gqlerror.List) int {
	for _, e := range list {
		if code, _ := e.Extensions["code"].(string); code != "" && code != string(errs.InvalidInput) && errs.Known(errs.Code(code)) {
			return errs.Code(code).HTTPStatus()
		}
	}
	if ct == mediaGraphQLJSON {
		return http.StatusBadRequest
	}
	return http.StatusOK
}

// writeRequestError answers a request that did not reach the executor, in
// the GraphQL error shape.
func writeRequestError(w http.ResponseWriter, ct string, status int, e *errs.Error) {
	if e.Details == nil {
		e.Details = map[string]any{}
	}
	ge := &gqlerror.Error{Message: e.Message, Extensions: map[string]any{"code": string(e.Code), "details": e.Details}}
	writeResponse(w, ct, status, &graphql.Response{Errors: gqlerror.List{ge}})
}

// writeResponse writes a response without re-encoding or copying its data:
// gqlgen has marshalled it already (a fleet answer is 2.4 MB), so the
// envelope is written around it, with a Content-Length.
func writeResponse(w http.ResponseWriter, ct string, status int, resp *graphql.Response) {
	var d map[string]any
	if len(resp.Errors) > 0 {
		d, _ = resp.Errors[0].Extensions["details"].(map[string]any)
	}
	errs.SetHeaders(w.Header(), status, d)
	var head, tail bytes.Buffer
	head.WriteByte('{')
	sep := ""
	if len(resp.Errors) > 0 {
		eb, _ := json.Marshal(resp.Errors)
		head.WriteString(`"errors":`)
		head.Write(eb)
		sep = ","
	}
	// A request error carries no data entry; an executed operation does
	// (null when its root failed).
	var data []byte
	if resp.Data != nil || len(resp.Errors) == 0 {
		head.WriteString(sep + `"data":`)
		data = resp.Data
		if data == nil {
			data = []byte("null")
		}
		sep = ","
	}
	if len(resp.Extensions) > 0 {
		xb, _ := json.Marshal(resp.Extensions)
		tail.WriteString(sep + `"extensions":`)
		tail.Write(xb)
	}
	tail.WriteByte('}')
	w.Header().Set("Content-Type", ct)
	w.Header().Set("Content-Length", strconv.Itoa(head.Len()+len(data)+tail.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(head.Bytes())
	_, _ = w.Write(data)
	_, _ = w.Write(tail.Bytes())
}

// maxRequestErrors bounds the errors of one request (graphql-js stops at
// 100 too): 2,400 aliases of an unknown field gave 2,400 errors, 469 KB.
const maxRequestErrors = 100

// capErrors keeps the first maxRequestErrors of a request's parse and
// validation errors, each once, and says how many there were. (gqlparser
// reports a literal refused in a named fragment twice, the same message at
// the same place: once for the fragment, once where it is spread.)
func capErrors(list gqlerror.List) gqlerror.List {
	if len(list) > 1 {
		seen := make(map[string]bool, len(list))
		var once gqlerror.List
		for _, e := range list {
			k := fmt.Sprintf("%s\x00%v\x00%v\x00%v", e.Message, e.Locations, e.Path, e.Rule)
			if !seen[k] {
				seen[k] = true
				once = append(once, e)
			}
		}
		list = once
	}
	if len(list) <= maxRequestErrors {
		return list
	}
	out := append(gqlerror.List{}, list[:maxRequestErrors]...)
	return append(out, gqlerror.Errorf("too many errors: the first %d of %d are shown", maxRequestErrors, len(list)))
}
