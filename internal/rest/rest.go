// Package rest is the method surface: POST /api/compute/{group}/{method},
// routed, validated and dispatched by the registry. It translates HTTP to a
// registry call and an error to the contract's JSON; nothing else.
package rest

import (
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"regexp"
	"strings"

	"github.com/go-chi/chi/v5"

	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// DefaultMaxBody is the request body limit of every method unless the
// registry sets another, and of GraphQL's requests and messages.
const DefaultMaxBody = registry.DefaultMaxBody

// Handler serves the method surface.
type Handler struct {
	Registry *registry.Registry
	Log      *slog.Logger
}

// Mount adds the routes to r.
func (h *Handler) Mount(r chi.Router) {
	r.HandleFunc("/api/compute", func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodGet && r.Method != http.MethodHead {
			h.notAllowed(w, r, "GET, HEAD", "use GET for the method index")
			return
		}
		h.index(w, r)
	})
	r.HandleFunc("/api/compute/{group}/{method}", h.call)
	// Anything else under the method surface answers in its error shape.
	r.HandleFunc("/api/compute/*", func(w http.ResponseWriter, r *http.Request) {
		// The path is not quoted: it is the client's bytes (NUL, a
		// decoded %2F that named a method where none is routed).
		h.WriteError(w, r, errs.E(errs.NotFound, "no method is served at this path; methods are /api/compute/{group}/{method}"))
	})
	r.Get("/openapi.json", func(w http.ResponseWriter, r *http.Request) {
		WriteJSON(w, http.StatusOK, h.Registry.OpenAPI("0.2.0"))
	})
}

func (h *Handler) index(w http.ResponseWriter, r *http.Request) {
	WriteJSON(w, http.StatusOK, h.Registry.Index())
}

// MethodPath reads the group and the method a method path names, each
// segment of the path as sent decoded once: a segment with an escaped
// letter (%6cist) is the same segment (RFC 3986, 6.2.2.2), and %2567et is
// the text %67et, not get (the router's params are decoded once already
// when the path needs no raw form, and were decoded again). ok is false
// for a path that is no /api/compute/{group}/{method}. The surface and the
// authentication in front of it read the path through this one function.
func MethodPath(r *http.Request) (group, name string, ok bool) {
	rest, ok := strings.CutPrefix(r.URL.EscapedPath(), "/api/compute/")
	if !ok {
		return "", "", false
	}
	g, n, ok := strings.Cut(rest, "/")
	if !ok || strings.Contains(n, "/") {
		return "", "", false
	}
	g, gerr := url.PathUnescape(g)
	n, nerr := url.PathUnescape(n)
	if gerr != nil || nerr != nil {
		return "", "", false
	}
	return g, n, true
}

// methodWord is what a group's or a method's name could be: one the
// answer may quote (a segment of other bytes, NUL or a slash, is not
// repeated back).
var methodWord = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9]*$`)

func (h *Handler) call(w http.ResponseWriter, r *http.Request) {
	r = r.WithContext(reqctx.WithReadBudget(r.Context(), store.ReadBudget))
	group, name, named := MethodPath(r)
	m, ok := h.Registry.Lookup(group, name)
	if !ok {
		if !named || !methodWord.MatchString(group) || !methodWord.MatchString(name) {
			h.WriteError(w, r, errs.E(errs.NotFound, "no method is served at this path"))
			return
		}
		h.WriteError(w, r, errs.E(errs.NotFound, "no method %s.%s", errs.Cut(group), errs.Cut(name)))
		return
	}
	if r.Method != http.MethodPost {
		h.notAllowed(w, r, http.MethodPost, "use POST for "+m.Path())
		return
	}
	body, rerr := ReadBody(w, r, m.BodyLimit())
	if rerr != nil {
		h.WriteError(w, r, rerr)
		return
	}
	out, err := h.Registry.Dispatch(r.Context(), m, body)
	if err != nil {
		h.WriteError(w, r, err, "method", m.Key())
		return
	}
	WriteJSON(w, http.StatusOK, out)
}

// notAllowed is the 405 answer, in the method surface's error shape.
func (h *Handler) notAllowed(w http.ResponseWriter, _ *http.Request, allow, msg string) {
	w.Header().Set("Allow", allow)
	WriteJSON(w, http.StatusMethodNotAllowed, map[string]any{"error": errs.E(errs.MethodNotAllowed, "%s", msg)})
}

// WriteError writes the contract's error body with its status.
// kv names the method for the log line of an internal error.
func (h *Handler) WriteError(w http.ResponseWriter, r *http.Request, err error, kv ...any) {
	e := PublicError(r.Context(), h.Log, err, append(kv, "path", r.URL.Path)...)
	errs.SetHeaders(w.Header(), e.Code.HTTPStatus(), e.Details)
	WriteJSON(w, e.Code.HTTPStatus(), map[string]any{"error": e})
}

// WriteJSON writes v as JSON.
func WriteJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

// WriteJSONRaw writes v as JSON keeping a Content-Type already set.
func WriteJSONRaw(w http.ResponseWriter, status int, v any) {
	if w.Header().Get("Content-Type") == "" {
		w.Header().Set("Content-Type", "application/json")
	}
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ReadBody reads a request's body of at most limit bytes, for both
// surfaces: PAYLOAD_TOO_LARGE at once when Content-Length says more (the
// client is not made to send it, nor held until its deadline), or when
// more arrives; INVALID_INPUT when the body stops before the request's
// deadline (details.reason "body-deadline": a slow link, not a malformed
// body) or cannot be read.
func ReadBody(w http.ResponseWriter, r *http.Request, limit int64) ([]byte, *errs.Error) {
	// A body is taken as sent: one in a content coding (gzip) was read as
	// its compressed bytes and refused as "not valid UTF-8", and one
	// labelled br but sent plain was accepted. An unsupported coding is
	// 415, with the codings taken (RFC 9110, 15.5.16).
	for _, v := range r.Header.Values("Content-Encoding") {
		for _, c := range strings.Split(v, ",") {
			if c = strings.TrimSpace(c); c != "" && !strings.EqualFold(c, "identity") {
				w.Header().Set("Accept-Encoding", "identity")
				return nil, errs.E(errs.UnsupportedMediaType, "send the body uncompressed: no Content-Encoding but identity is supported")
			}
		}
	}
	if r.ContentLength > limit {
		return nil, errs.E(errs.PayloadTooLarge, "the body is over %d bytes", limit)
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, limit))
	if err == nil {
		return body, nil
	}
	var mbe *http.MaxBytesError
	switch {
	case errors.As(err, &mbe):
		return nil, errs.E(errs.PayloadTooLarge, "the body is over %d bytes", limit)
	case errors.Is(err, os.ErrDeadlineExceeded):
		return nil, errs.E(errs.InvalidInput, "the body did not arrive before the request's deadline").With("reason", "body-deadline")
	}
	return nil, errs.E(errs.InvalidInput, "could not read the body")
}
