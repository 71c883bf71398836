package testkit

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strings"
	"sync"
	"syscall"

	"github.com/bettercompute/computed/internal/apicheck"
)

// Every answer of the method surface that a test receives through an Env is
// checked against the OpenAPI document the server serves (GET /openapi.json,
// read once per test binary): a 200 against the method's output schema, an
// error against the responses the method declares. A test fails when the
// document and the server disagree, whatever the test itself asserts.
var (
	docOnce sync.Once
	doc     *apicheck.Doc
	docErr  error
)

func (e *Env) document() (*apicheck.Doc, error) {
	docOnce.Do(func() {
		res, err := http.Get(e.Server.URL + "/openapi.json")
		if err != nil {
			docErr = err
			return
		}
		defer res.Body.Close()
		b, _ := io.ReadAll(res.Body)
		doc, docErr = apicheck.New(b)
	})
	return doc, docErr
}

// checkAnswer checks one answer to POST path.
func (e *Env) checkAnswer(req *http.Request, body []byte, r Resp) {
	if req.Method != http.MethodPost || !strings.HasPrefix(req.URL.Path, "/api/compute/") {
		return
	}
	d, err := e.document()
	if err != nil {
		e.T.Errorf("the OpenAPI document: %v", err)
		return
	}
	if !d.Has(req.URL.Path) {
		return // an unknown method: 404 from the router, not a documented method
	}
	if err := d.Answer(req.URL.Path, r.Status, r.Raw); err != nil {
		e.T.Errorf("the answer does not match the OpenAPI document: %v\nrequest: %.500s\nanswer: %.2000s", err, body, r.Raw)
		return
	}
	if r.Status == http.StatusOK {
		record(strings.TrimPrefix(req.URL.Path, "/api/compute/"), body, r.Raw)
	}
}

// --- examples ----------------------------------------------------------------

// ExamplesEnv names the file that receives one request and answer per method
// when set (make examples). docgen renders them into docs/api.
const ExamplesEnv = "COMPUTE_RECORD_EXAMPLES"

// Example is one recorded call.
type Example struct {
	Request json.RawMessage `json:"request"`
	Answer  json.RawMessage `json:"answer"`
}

var (
	recMu    sync.Mutex
	recorded = map[string][]Example{} // "group/method" -> every 200 seen
)

func record(method string, req, answer []byte) {
	if os.Getenv(ExamplesEnv) == "" || !json.Valid(req) {
		return
	}
	recMu.Lock()
	defer recMu.Unlock()
	recorded[method] = append(recorded[method], Example{Request: append([]byte{}, req...), Answer: append([]byte{}, answer...)})
}

// choose picks a method's example: the one of median answer size, so
// neither an edge case (a 128-character id, an empty page) nor the largest
// answer; ties go to the shorter request, then the text. The order of the
// recordings does not matter.
func choose(list []Example) Example {
	sort.Slice(list, func(i, j int) bool {
		a, b := list[i], list[j]
		if len(a.Answer) != len(b.Answer) {
			return len(a.Answer) < len(b.Answer)
		}
		if len(a.Request) != len(b.Request) {
			return len(a.Request) < len(b.Request)
		}
		return string(a.Request)+string(a.Answer) < string(b.Request)+string(b.Answer)
	})
	return list[(len(list)-1)/2]
}

// writeExamples merges this test binary's recordings into the examples
// file: several packages' binaries record into one file (make examples
// removes it first), under a lock, and since choose orders all candidates
// the result does not depend on which binary writes first.
func writeExamples() error {
	path := os.Getenv(ExamplesEnv)
	if path == "" {
		return nil
	}
	lock, err := os.OpenFile(path+".lock", os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	defer lock.Close()
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX); err != nil {
		return err
	}
	defer os.Remove(path + ".lock")
	recMu.Lock()
	defer recMu.Unlock()
	out := map[string]Example{}
	if b, err := os.ReadFile(path); err == nil {
		if err := json.Unmarshal(b, &out); err != nil {
			return fmt.Errorf("%s: %w", path, err)
		}
	}
	for m, list := range recorded {
		key := strings.Replace(m, "/", ".", 1)
		if prev, ok := out[key]; ok {
			list = append(list, prev)
		}
		for i := range list {
			var req, ans bytes.Buffer
			if err := json.Indent(&req, bytes.TrimSpace(list[i].Request), "", "  "); err != nil {
				return err
			}
			if err := json.Indent(&ans, bytes.TrimSpace(list[i].Answer), "", "  "); err != nil {
				return err
			}
			list[i] = Example{Request: req.Bytes(), Answer: ans.Bytes()}
		}
		out[key] = choose(list)
	}
	b, err := json.MarshalIndent(out, "", "  ")
	if err != nil {
		return err
	}
	if err := os.WriteFile(path, append(b, '\n'), 0o644); err != nil {
		return fmt.Errorf("write %s: %w", path, err)
	}
	return nil
}
