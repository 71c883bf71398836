// Package errs is the one error vocabulary of the product. Both the method
// surface and GraphQL map these codes: HTTP statuses come from one table here,
// GraphQL puts the code in errors[].extensions.code.
package errs

import (
	"errors"
	"fmt"
	"net/http"
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
}

// Known reports a contract code.
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

// With returns a copy of e with one more detail.
func (e *Error) With(key string, value any) *Error {
	d := make(map[string]any, len(e.Details)+1)
	for k, v := range e.Details {
		d[k] = v
	}
	d[key] = value
	return &Error{Code: e.Code, Message: e.Message, Details: d}
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
		return e
	}
	return E(Internal, "internal error").With("requestId", requestID)
}
