// Package apicheck checks requests and answers of the method surface against
// the OpenAPI document the server serves: a 200 answer against the method's
// output schema, an error answer against the Error schema and the responses
// the method declares, a request body against the input schema. Tests use it
// (testkit checks every answer of the e2e suite; docgen checks the recorded
// examples), so the document cannot promise what the server does not do.
package apicheck

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strconv"
	"strings"
	"sync"

	"github.com/santhosh-tekuri/jsonschema/v6"

	"github.com/bettercompute/computed/internal/pattern"
)

// base is the document's URL for the compiler (any absolute URL will do).
const base = "https://computed.invalid/openapi.json"

// Doc is a compiled OpenAPI document.
type Doc struct {
	doc   map[string]any
	mu    sync.Mutex
	c     *jsonschema.Compiler
	cache map[string]*jsonschema.Schema
}

// New reads an OpenAPI document (JSON).
func New(raw []byte) (*Doc, error) {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(raw))
	if err != nil {
		return nil, fmt.Errorf("apicheck: the document is not JSON: %w", err)
	}
	doc, ok := v.(map[string]any)
	if !ok {
		return nil, fmt.Errorf("apicheck: the document is not an object")
	}
	c := jsonschema.NewCompiler()
	c.UseRegexpEngine(pattern.Engine)
	c.DefaultDraft(jsonschema.Draft2020)
	c.AssertFormat()
	if err := c.AddResource(base, v); err != nil {
		return nil, err
	}
	return &Doc{doc: doc, c: c, cache: map[string]*jsonschema.Schema{}}, nil
}

// pointer escapes one JSON pointer token.
func pointer(tok string) string {
	return strings.ReplaceAll(strings.ReplaceAll(tok, "~", "~0"), "/", "~1")
}

func (d *Doc) compile(ptr string) (*jsonschema.Schema, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	if s, ok := d.cache[ptr]; ok {
		return s, nil
	}
	s, err := d.c.Compile(base + "#" + ptr)
	if err != nil {
		return nil, err
	}
	d.cache[ptr] = s
	return s, nil
}

func (d *Doc) operation(path string) (map[string]any, error) {
	paths, _ := d.doc["paths"].(map[string]any)
	item, _ := paths[path].(map[string]any)
	op, _ := item["post"].(map[string]any)
	if op == nil {
		return nil, fmt.Errorf("the document has no POST %s", path)
	}
	return op, nil
}

// Has tells whether the document describes POST path.
func (d *Doc) Has(path string) bool {
	_, err := d.operation(path)
	return err == nil
}

func validate(s *jsonschema.Schema, body []byte) error {
	v, err := jsonschema.UnmarshalJSON(bytes.NewReader(body))
	if err != nil {
		return fmt.Errorf("not JSON: %w", err)
	}
	return s.Validate(v)
}

// Input checks a request body of POST path against the input schema.
func (d *Doc) Input(path string, body []byte) error {
	if _, err := d.operation(path); err != nil {
		return err
	}
	s, err := d.compile("/paths/" + pointer(path) + "/post/requestBody/content/application~1json/schema")
	if err != nil {
		return err
	}
	return validate(s, body)
}

// Answer checks an answer of POST path: a 200 against the output schema;
// any other status must be one the operation declares, with the body of its
// response (the Error schema, its code matching the status).
func (d *Doc) Answer(path string, status int, body []byte) error {
	op, err := d.operation(path)
	if err != nil {
		return err
	}
	responses, _ := op["responses"].(map[string]any)
	code := strconv.Itoa(status)
	r, ok := responses[code].(map[string]any)
	if !ok {
		return fmt.Errorf("POST %s answered %d, which the document does not declare for it", path, status)
	}
	ptr := "/paths/" + pointer(path) + "/post/responses/" + code
	if ref, ok := r["$ref"].(string); ok {
		ptr = strings.TrimPrefix(ref, "#")
	}
	s, err := d.compile(ptr + "/content/application~1json/schema")
	if err != nil {
		return err
	}
	if err := validate(s, body); err != nil {
		return fmt.Errorf("POST %s %d: %w", path, status, err)
	}
	if status != 200 {
		// The response component is named by the code it answers.
		var e struct {
			Error struct{ Code string }
		}
		_ = json.Unmarshal(body, &e)
		if want := strings.TrimPrefix(ptr, "/components/responses/"); want != e.Error.Code {
			return fmt.Errorf("POST %s %d: code %s, the document says %s", path, status, e.Error.Code, want)
		}
	}
	return nil
}
