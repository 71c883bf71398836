// Package registry is the one description of every method: group, name,
// kind, authorization, module, phase, status, input schema and handler.
// The REST adapter routes and validates from it, GraphQL resolvers call
// through it, and the method index, the OpenAPI document and docs/api are
// rendered from it.
//
// # Finding a method's handler
//
// Every domain package registers its methods in one function, Methods
// (internal/app lists them all). Each entry is
//
//	registry.Def(description, locate, handler)
//
// and the third argument is the handler: a named function
// func(ctx, store.Q, *In) (*Out, error) of that package (pools.Create for
// pools.create, a service's method such as s.Start for instances.start).
// Its In and Out are the method's input and output types. So to go from
// "pools.create" to its code: grep the package for `"create"` in Methods,
// or run `go doc ./internal/pools Create`. docs/api/handlers.md lists every
// method with its handler, input and output type, generated from here.
//
// # One call path
//
// Dispatch (a method-surface body) decodes JSON into the typed input with
// the body decoder (decode.go, assign.go); Call (a GraphQL resolver, or any
// Go caller) takes the typed input and validates it with the same rules
// and messages (typed.go). Both then go through the same path: the
// credential, the authorization decision, the handler (a mutation in a
// transaction that also writes the audit record), metrics.
package registry

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/jmoiron/sqlx"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Kind is read or mutation.
type Kind string

const (
	Read     Kind = "read"
	Mutation Kind = "mutation"
)

// Credential says how a method's caller proves who it is.
type Credential string

const (
	Bearer    Credential = "bearer"     // a bearer token; decided as Permission @ Resource
	JoinToken Credential = "join-token" // the join token in the input is the credential
	NodeCred  Credential = "node"       // the node's own credential (a bearer token of a node principal)
)

// Group describes a method group for the docs.
type Group struct {
	Name    string
	Summary string
}

// Method is one entry of the registry.
type Method struct {
	Group      string
	Name       string
	Summary    string   // one sentence: what it does
	Notes      []string // rules, in the seed pages' words
	Kind       Kind
	Credential Credential
	Permission authz.Permission // e.g. authz.ProfilesManage
	Resource   string           // authz resource type
	Items      bool             // "+ items": decided on the tenant, items filtered
	Module     string
	Phase      string
	Status     string
	Input      []Field
	MaxBody    int64 // request body limit; 0 is DefaultMaxBody (BodyLimit)
	// AuditFields are input fields kept in the audit record's detail (a
	// denial's reason).
	AuditFields []string
	// AuditOutput are fields of a successful call's output kept in the
	// detail, as paths of its JSON form ("joinToken.joinTokenId"), under
	// their last name: what a create generated (the workflow, the token)
	// when the record's resource is its parent.
	AuditOutput []string
	// Quiet says when a successful mutation writes no audit record (an
	// inventory report that stored nothing: nodes report every minute).
	Quiet func(out any) bool
	// Holder names who presented a credential that is no principal (the
	// join token of nodes.join) for the audit record: the actor, and the
	// resource the credential belongs to (its pool, with the pool's tenant).
	// Set with WithHolder.
	holder func(ctx context.Context, q store.Q, in any) (audit.Actor, authz.Resource)

	input  reflect.Type // Def's In, the type the handler takes a pointer to
	output reflect.Type // Def's Out: the output schema is reflected from it (output.go)
	// handler is the function Def was given (HandlerName names it); run
	// calls it with a *In.
	handler  any
	run      func(ctx context.Context, q store.Q, in any) (any, error)
	locate   func(ctx context.Context, q store.Q, in any) (authz.Resource, error)
	outputID []outputID // where an output names its resource (auditResource)
}

// WithHolder sets the function naming the holder of a method's credential
// when it is no principal (Method.holder).
func WithHolder[In any](m Method, f func(ctx context.Context, q store.Q, in *In) (audit.Actor, authz.Resource)) Method {
	m.holder = func(ctx context.Context, q store.Q, in any) (audit.Actor, authz.Resource) { return f(ctx, q, in.(*In)) }
	return m
}

// Key is "group.name".
func (m *Method) Key() string { return m.Group + "." + m.Name }

// Path is the method surface's URL path.
func (m *Method) Path() string { return "/api/compute/" + m.Group + "/" + m.Name }

// Authorization renders "perm @ resource [+ items]".
func (m *Method) Authorization() string {
	switch m.Credential {
	case JoinToken:
		return "the join token in the input"
	case NodeCred:
		return "the node's own credential"
	}
	if m.Resource == authz.Platform && m.Permission != authz.TenantsRead {
		return "operator"
	}
	s := string(m.Permission) + " @ " + m.Resource
	if m.Items {
		s += " + items"
	}
	return s
}

// Handler is a method's implementation: it receives the validated input and
// a query handle (the transaction, for mutations).
type Handler[In, Out any] func(ctx context.Context, q store.Q, in *In) (*Out, error)

// Def binds a typed handler to a method description: h is the method's
// implementation, In its input type (the fields of m.Input, by json name)
// and Out its output type. locate names the resource the decision is
// about; nil means the default for m.Resource (tenantId plus the resource
// type's id field).
func Def[In, Out any](m Method, locate func(ctx context.Context, q store.Q, in *In) (authz.Resource, error), h Handler[In, Out]) Method {
	if m.Status == "" {
		m.Status = "registered"
	}
	if m.Credential == "" {
		m.Credential = Bearer
	}
	m.input = reflect.TypeFor[In]()
	m.output = reflect.TypeFor[Out]()
	m.outputID = outputIDs(m.output)
	m.handler = h
	if locate != nil {
		m.locate = func(ctx context.Context, q store.Q, in any) (authz.Resource, error) { return locate(ctx, q, in.(*In)) }
	}
	m.run = func(ctx context.Context, q store.Q, in any) (any, error) {
		out, err := h(ctx, q, in.(*In))
		if err != nil {
			return nil, err
		}
		return out, nil
	}
	return m
}

// HandlerName is the handler's Go name as the runtime knows it, such as
// github.com/bettercompute/computed/internal/pools.Create.
func (m *Method) HandlerName() string {
	if m.handler == nil {
		return ""
	}
	name := runtime.FuncForPC(reflect.ValueOf(m.handler).Pointer()).Name()
	return strings.TrimSuffix(name, "-fm") // a method value: pkg.(*T).M-fm
}

// InputType and OutputType are the Go types of the method's input and
// output.
func (m *Method) InputType() reflect.Type  { return m.input }
func (m *Method) OutputType() reflect.Type { return m.output }

// idFields maps resource types to the input field naming the resource.
var idFields = map[string]string{
	authz.Profile:  "profileId",
	authz.Pool:     "poolId",
	authz.Node:     "nodeId",
	authz.Project:  "projectId",
	authz.Instance: "instanceId",
}

// defaultResource reads tenantId and the resource's id field from the
// typed input.
func defaultResource(resourceType string, in any) authz.Resource {
	r := authz.Resource{Type: resourceType, TenantID: inputString(in, "tenantId")}
	if f, ok := idFields[resourceType]; ok {
		r.ID = inputString(in, f)
	}
	return r
}

// inputField is the input's field of a json name (the zero Value when
// the type has none).
func inputField(in any, name string) reflect.Value {
	v := reflect.ValueOf(in)
	for v.Kind() == reflect.Pointer {
		if v.IsNil() {
			return reflect.Value{}
		}
		v = v.Elem()
	}
	if v.Kind() != reflect.Struct {
		return reflect.Value{}
	}
	return fieldByIndex(v, structFields(v.Type())[name])
}

// inputString is a string field of the input ("" when absent).
func inputString(in any, name string) string {
	v := inputField(in, name)
	for v.Kind() == reflect.Pointer && !v.IsNil() {
		v = v.Elem()
	}
	if v.Kind() == reflect.String {
		return v.String()
	}
	return ""
}

// Registry holds every method and dispatches calls to them.
type Registry struct {
	Groups  []Group
	methods map[string]*Method
	order   []*Method
	db      *store.DB
	log     *slog.Logger
	metrics *metrics

	schemaOnce sync.Once
	schemas    *schemaSet // output schemas, rendered on first use (output.go)
}

// New builds a registry; db may be nil for rendering documents only.
func New(db *store.DB, logger *slog.Logger, reg prometheus.Registerer, groups []Group, methods ...[]Method) *Registry {
	r := &Registry{Groups: groups, methods: map[string]*Method{}, db: db, log: logger}
	for _, list := range methods {
		for i := range list {
			m := list[i]
			for j := range m.Input {
				m.Input[j].compile()
			}
			if _, dup := r.methods[m.Key()]; dup {
				panic("registry: duplicate method " + m.Key())
			}
			if m.Credential != JoinToken {
				// A misspelled permission stops the server at start-up.
				authz.CheckKnown(m.Permission, "method "+m.Key())
			}
			if m.input == nil {
				panic("registry: " + m.Key() + " was not made with Def")
			}
			// So does a field the input type cannot hold.
			checkInputType(m.Key(), m.Input, m.input)
			r.methods[m.Key()] = &m
			r.order = append(r.order, &m)
		}
	}
	sort.SliceStable(r.order, func(i, j int) bool {
		gi, gj := r.groupIndex(r.order[i].Group), r.groupIndex(r.order[j].Group)
		return gi < gj
	})
	if reg != nil {
		r.metrics = newMetrics(reg)
	}
	return r
}

func (r *Registry) groupIndex(g string) int {
	for i, x := range r.Groups {
		if x.Name == g {
			return i
		}
	}
	return len(r.Groups)
}

// Methods returns every method in docs order.
func (r *Registry) Methods() []*Method { return r.order }

// Lookup finds a method.
func (r *Registry) Lookup(group, name string) (*Method, bool) {
	m, ok := r.methods[group+"."+name]
	return m, ok
}

// Call invokes a method by key with its typed input (GraphQL resolvers
// build it from their arguments): the same path as a method-surface call,
// the input validated by the same rules with the same messages and
// defaults (typed.go). In and Out must be the method's input and output
// types; *in is not changed.
func Call[In, Out any](ctx context.Context, r *Registry, key string, in *In) (*Out, error) {
	m, ok := r.methods[key]
	if !ok {
		return nil, fmt.Errorf("registry: unknown method %s", key)
	}
	if m.input != reflect.TypeFor[In]() || m.output != reflect.TypeFor[Out]() {
		return nil, fmt.Errorf("registry: %s takes *%s and returns *%s, not *%s and *%s",
			key, m.input, m.output, reflect.TypeFor[In](), reflect.TypeFor[Out]())
	}
	out, err := r.call(ctx, m, func() (any, error) {
		cp := *in
		if err := validateTyped(m.Input, &cp); err != nil {
			return nil, err
		}
		return &cp, nil
	})
	if err != nil {
		return nil, err
	}
	return out.(*Out), nil
}

// Validate checks a typed input by the rules of the method key, as Call
// does, without calling it: for a GraphQL field that reads through the
// loaders (the root tenant, an auditLog connection) but takes the
// arguments of a method, so the graph refuses what the method refuses,
// with the same words. *in is not changed.
func Validate[In any](r *Registry, key string, in *In) error {
	m, ok := r.methods[key]
	if !ok {
		return fmt.Errorf("registry: unknown method %s", key)
	}
	if m.input != reflect.TypeFor[In]() {
		return fmt.Errorf("registry: %s takes *%s, not *%s", key, m.input, reflect.TypeFor[In]())
	}
	cp := *in
	return validateTyped(m.Input, &cp)
}

// Dispatch runs one method-surface call: the body is decoded into the
// method's typed input (decode.go, assign.go), then the call goes the
// same way as Call's.
func (r *Registry) Dispatch(ctx context.Context, m *Method, raw []byte) (any, error) {
	return r.call(ctx, m, func() (any, error) {
		v, err := decode(raw, m.Input)
		if err != nil {
			return nil, err
		}
		in := reflect.New(m.input)
		if err := assign(in.Elem(), v); err != nil {
			return nil, err // a method whose fields and input type disagree: a bug
		}
		return in.Interface(), nil
	})
}

// call runs one call: authenticate, validate (input returns the validated
// *In), decide, run (mutations in a transaction that also writes the audit
// record), count and time it.
func (r *Registry) call(ctx context.Context, m *Method, input func() (any, error)) (out any, err error) {
	start := time.Now()
	defer func() {
		if r.metrics != nil {
			// Counted under the code the client is answered (a database
			// or context error is classified as the surfaces classify it:
			// a timeout is UNAVAILABLE there, not INTERNAL).
			code := errs.CodeOf(err)
			if e := store.ClassifyIn(ctx, err); e != nil {
				code = e.Code
			}
			r.metrics.observe(m.Key(), code, err == nil, time.Since(start))
		}
	}()
	p := reqctx.PrincipalFrom(ctx)
	if m.Credential != JoinToken && p == nil {
		return nil, errs.E(errs.Unauthenticated, "a bearer token is required")
	}
	in, err := input()
	if err != nil {
		return nil, err
	}
	if m.Credential == NodeCred && p.Kind != "node" {
		err := errs.E(errs.PermissionDenied, "%s takes a node credential", m.Key())
		if m.Kind == Mutation {
			r.auditFailure(ctx, m, in, defaultResource(m.Resource, in), err)
		}
		return nil, err
	}
	// decide locates the resource and decides on q: the pool for reads,
	// the transaction for mutations (DecideInTx).
	decide := func(q store.Q) (authz.Resource, error) {
		if m.Credential == JoinToken {
			return authz.Resource{Type: m.Resource}, nil
		}
		// A refusal is recorded (audit) with the resource as the caller
		// named it: the located one (a join token's pool, found by the
		// token's id alone) is another tenant's when the caller named
		// another tenant's id, and its record, which the caller's admins
		// read, told them the id existed and whose pool it was in, where
		// the answer was the NOT_FOUND of a made-up id.
		named := defaultResource(m.Resource, in)
		res := named
		if m.locate != nil {
			var err error
			if res, err = m.locate(ctx, q, in); err != nil {
				return named, err
			}
		}
		var err error
		if m.Kind == Mutation {
			err = authz.DecideInTx(ctx, q, p, m.Permission, res)
		} else {
			err = authz.Decide(ctx, q, p, m.Permission, res)
		}
		if err != nil {
			if on, ok := authz.DeniedOn(err); ok && on.Type == res.Type && on.ID == res.ID && res.ID != "" {
				// Denied on the located resource, which the answer names:
				// it is in the named tenant, and its admins read the
				// refusal on it (a member's joinTokens.revoke was recorded
				// on a pool of no id, missing from the pool's trail).
				return res, err
			}
			return named, err
		}
		return res, nil
	}
	if m.Kind == Read {
		if _, err := decide(r.db); err != nil {
			return nil, err
		}
		return m.run(ctx, r.db, in)
	}
	// A mutation is decided inside its transaction, with the rows the
	// decision rests on locked, so nothing changes between the decision
	// and the write.
	res := defaultResource(m.Resource, in)
	var kept error // a refusal whose writes stand (KeepWrites)
	err = r.db.Tx(ctx, func(tx *sqlx.Tx) error {
		var rerr error
		kept = nil
		// First of what the commit sends (a node's credential: before
		// anything else, auth.HoldCredential): the commit fails if the
		// credential is revoked by then.
		if rerr = auth.HoldCredential(ctx, tx, p); rerr != nil {
			return rerr
		}
		if res, rerr = decide(tx); rerr != nil {
			return rerr
		}
		out, rerr = m.run(ctx, tx, in)
		var k keptWrites
		if errors.As(rerr, &k) {
			kept = k.err
			return nil // commit what the refusal leaves behind
		}
		if rerr != nil {
			return rerr
		}
		if m.Quiet != nil && m.Quiet(out) {
			return nil
		}
		return audit.Write(ctx, tx, auditEntry(ctx, tx, m, in, res, out, nil))
	})
	if err == nil && kept != nil {
		out, err = nil, kept
	}
	if err != nil {
		// A credential in the input that authenticated no one (the join
		// token of nodes.join) is a failed authentication: it spends the
		// client address's budget as a bad bearer token does, after the
		// rollback (the budget's statement takes a connection of its own),
		// and is answered RATE_LIMITED once that is spent. The audit
		// record says what the caller was answered; a refusal of the
		// budget is not recorded, as no call a limit refuses is (each
		// guess past it wrote an @platform record: an anonymous flood grew
		// the operator's trail at the request rate).
		failed := err
		err = auth.Charge(ctx, auth.RevokedWhileRunning(ctx, r.db, p, auth.RevokedInFlight(err)))
		if !(auth.IsFailed(failed) && !auth.IsFailed(err) && errs.CodeOf(err) == errs.RateLimited) {
			r.auditFailure(ctx, m, in, res, err)
		}
		return nil, store.Wrap(err)
	}
	return out, nil
}

// KeepWrites marks a mutation handler's refusal whose transaction commits
// all the same: what the refusal must leave behind, written under the
// locks the call holds, so that the next call waiting for them finds it.
// A TPM challenge answered wrongly is spent this way: spent after the
// rollback (as it was), the next answer through the same token took the
// token's lock first and found it unspent (a probe had up to 8 wrong
// answers refused as wrong for one challenge). The handler must have
// written nothing else it wants undone. The caller is answered err, and
// the refusal is audited as any other.
func KeepWrites(err error) error { return keptWrites{err} }

type keptWrites struct{ err error }

func (k keptWrites) Error() string { return k.err.Error() }
func (k keptWrites) Unwrap() error { return k.err }

// auditEntry is the audit record of one mutation attempt (err nil: a
// success). Its tenant is the tenant the call names (tenants.create: the
// tenant created or asked for), else the tenant of the resource its
// credential belongs to (a join token's pool) or the credential's home
// tenant (a node's, a service or user principal's); audit.Write records a
// tenant that does not exist, or none, under the platform.
func auditEntry(ctx context.Context, q store.Q, m *Method, in any, res authz.Resource, out any, err error) audit.Entry {
	e := audit.Entry{Method: m.Key(), Outcome: outcome(ctx, err), Detail: auditDetail(m, in, out, err)}
	if m.holder != nil && in != nil {
		// The credential's own resource (a join token's pool) when the call
		// made nothing more specific (the node a join admitted).
		actor, owner := m.holder(ctx, q, in)
		e.Actor = &actor
		if res.ID == "" {
			e.TenantID, e.Resource = owner.TenantID, auditResource(m, res, out)
			if e.Resource.ID == "" {
				e.Resource = audit.Resource{Type: owner.Type, ID: owner.ID}
			}
			return e
		}
	}
	e.TenantID = res.TenantID
	if e.TenantID == "" {
		// A call naming no tenant (a node's own methods) belongs to its
		// credential's home tenant: a node's, or a service or user
		// principal's (a probe's admin token calling inventory.report was
		// refused, and the record went to the platform, where the tenant's
		// admins could not read it). The operator's are the platform's.
		if p := reqctx.PrincipalFrom(ctx); p != nil {
			e.TenantID = p.TenantID
		}
	}
	e.Resource = auditResource(m, res, out)
	return e
}

// auditDetail is the JSON object of the method's AuditFields and of the
// ids its input names besides the tenant and the resource (the join
// request an approval is about, the principal a grant binds), from the
// typed input; then, of a success, the method's AuditOutput (the ids a
// create generated), and of a failure, the ids its error's details name
// (the join request a refused join is about).
func auditDetail(m *Method, in any, out any, err error) []byte {
	var b []byte
	seen := map[string]bool{}
	put := func(name string, val []byte) {
		if seen[name] {
			return
		}
		seen[name] = true
		k, _ := json.Marshal(name)
		if b == nil {
			b = append(b, '{')
		} else {
			b = append(b, ',')
		}
		b = append(append(append(b, k...), ':'), val...)
	}
	add := func(f *Field) {
		x := inputField(in, f.Name)
		if absent(f, x) {
			return
		}
		val, err := json.Marshal(x.Interface())
		if err != nil {
			return
		}
		put(f.Name, val)
	}
	for i := range m.Input {
		f := &m.Input[i]
		if f.Type == String && strings.HasSuffix(f.Name, "Id") && f.Name != "tenantId" && f.Name != idFields[m.Resource] &&
			!slices.Contains(m.AuditFields, f.Name) {
			add(f)
		}
	}
	for _, name := range m.AuditFields {
		if f := fieldNamed(m.Input, name); f != nil {
			add(f)
		}
	}
	if err == nil && out != nil && len(m.AuditOutput) > 0 {
		if raw, jerr := json.Marshal(out); jerr == nil {
			for _, path := range m.AuditOutput {
				v := jsonAt(raw, path)
				if v != nil && string(v) != "null" {
					put(path[strings.LastIndexByte(path, '.')+1:], v)
				}
			}
		}
	}
	if e, ok := errs.As(err); ok {
		keys := make([]string, 0, len(e.Details))
		for k := range e.Details {
			if strings.HasSuffix(k, "Id") && k != "requestId" {
				keys = append(keys, k)
			}
		}
		slices.Sort(keys)
		for _, k := range keys {
			if val, jerr := json.Marshal(e.Details[k]); jerr == nil {
				put(k, val)
			}
		}
	}
	if b != nil {
		b = append(b, '}')
	}
	return b
}

// WithAuditFields returns m keeping these input fields in its audit
// records' detail.
func (m Method) WithAuditFields(names ...string) Method {
	m.AuditFields = append(slices.Clone(m.AuditFields), names...)
	return m
}

// WithAuditOutput returns m keeping these paths of its output in its audit
// records' detail (AuditOutput).
func (m Method) WithAuditOutput(paths ...string) Method {
	m.AuditOutput = append(slices.Clone(m.AuditOutput), paths...)
	return m
}

// jsonAt returns the JSON value at a dotted path of object keys in raw
// (nil when there is none).
func jsonAt(raw []byte, path string) json.RawMessage {
	cur := json.RawMessage(raw)
	for _, key := range strings.Split(path, ".") {
		var obj map[string]json.RawMessage
		if json.Unmarshal(cur, &obj) != nil {
			return nil
		}
		next, ok := obj[key]
		if !ok {
			return nil
		}
		cur = next
	}
	return cur
}

// outputID is a resource id field of an output type.
type outputID struct {
	typ   string // authz resource type
	index []int  // reflect field index
}

// outputIDs finds, once per method, the fields of an output type that
// name a resource: instanceId, nodeId, projectId and poolId at its top
// level (embedded structs included), the most specific first.
func outputIDs(t reflect.Type) []outputID {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil
	}
	fields := structFields(t)
	var ids []outputID
	for _, typ := range []string{authz.Instance, authz.Node, authz.Project, authz.Pool} {
		if x, ok := fields[idFields[typ]]; ok {
			ft := t.FieldByIndex(x).Type
			if ft.Kind() == reflect.String || ft.Kind() == reflect.Pointer && ft.Elem().Kind() == reflect.String {
				ids = append(ids, outputID{typ: typ, index: x})
			}
		}
	}
	return ids
}

// auditResource names the resource of a mutation; for creates, whose id is
// generated, the output's id names it (the first of the method's outputID
// fields that is set). tenants.create is about the tenant it creates.
func auditResource(m *Method, res authz.Resource, out any) audit.Resource {
	switch {
	case res.Type == authz.Platform && res.TenantID != "":
		return audit.Resource{Type: authz.Tenant, ID: res.TenantID}
	case res.Type == authz.Platform:
		return audit.Resource{Type: authz.Platform}
	case res.ID != "":
		return audit.Resource{Type: res.Type, ID: res.ID}
	}
	if ov := reflect.ValueOf(out); ov.Kind() == reflect.Pointer && !ov.IsNil() {
		for _, id := range m.outputID {
			f := fieldByIndex(ov.Elem(), id.index)
			for f.Kind() == reflect.Pointer && !f.IsNil() {
				f = f.Elem()
			}
			if f.Kind() == reflect.String && f.String() != "" {
				return audit.Resource{Type: id.typ, ID: f.String()}
			}
		}
	}
	if res.Type == authz.Tenant {
		return audit.Resource{Type: authz.Tenant, ID: res.TenantID}
	}
	return audit.Resource{Type: res.Type, ID: res.ID}
}

// outcome is an audit record's outcome for a call that ended with err: the
// code the client was answered (rest.PublicError classifies the same way:
// a cancelled request or an unreachable database is UNAVAILABLE, a broken
// constraint CONFLICT, NOT_FOUND or INVALID_INPUT), INTERNAL for anything
// else.
func outcome(ctx context.Context, err error) string {
	if err == nil {
		return audit.Success
	}
	if e := store.ClassifyIn(ctx, err); e != nil {
		return string(e.Code)
	}
	return string(errs.Internal)
}

// auditFailure records a refused or failed mutation after its rollback
// (nothing when the database is unreachable: the record could not be
// written either; a call whose client went away is recorded, whatever
// its connection said).
func (r *Registry) auditFailure(ctx context.Context, m *Method, in any, res authz.Resource, err error) {
	cancelled := store.Cancelled(ctx, err)
	if store.Unreachable(err) && !cancelled {
		return
	}
	if cancelled {
		err = context.Canceled // the outcome: the cancellation, once ctx no longer says so
	}
	ctx = context.WithoutCancel(ctx)
	if aerr := audit.Write(ctx, r.db, auditEntry(ctx, r.db, m, in, res, nil, err)); aerr != nil {
		r.log.ErrorContext(ctx, "audit write failed", "method", m.Key(), "requestId", reqctx.RequestID(ctx), "err", aerr)
	}
}

// --- common fields -------------------------------------------------------

// Patterns from the seed pages.
const (
	TenantPattern    = `^[A-Za-z0-9._:-]{1,128}$`
	ProfileIDPattern = `^[a-z0-9](?:[a-z0-9._-]{0,126}[a-z0-9])?$`
)

// TenantID is the tenantId field every method takes.
func TenantID() Field {
	return Field{Name: "tenantId", Type: String, Required: true, MaxLength: 128, Pattern: TenantPattern,
		Description: "the caller's tenant"}
}

// ID is a required id field of a prefix (poolId, nodeId, ...).
func ID(name, prefix string) Field {
	return Field{Name: name, Type: String, Required: true, Pattern: ids.Pattern(prefix)}
}

// ExpectedVersion is the optimistic-concurrency field: the rowVersion the
// caller last read.
func ExpectedVersion() Field {
	return Field{Name: "expectedVersion", Type: Integer, Min: Int(1),
		Description: "the rowVersion the caller last read; a mismatch is CONFLICT"}
}

// PageLimit is the page size field of a list: page.DefaultLimit, at most
// page.MaxLimit.
func PageLimit() Field { return Limit(page.DefaultLimit, page.MaxLimit) }

// Limit is the page size field with bounds of its own (a seed page's).
func Limit(def, max int64) Field {
	return Field{Name: "limit", Type: Integer, Min: Int(1), Max: Int(max), Default: def}
}

// Cursor is the page cursor field.
func Cursor() Field {
	return Field{Name: "cursor", Type: String, MaxLength: page.MaxCursor}
}

// Name is a bounded display-name field. It holds no control character
// (C0, DEL, C1): a node's name reaches a host's hostname through a
// profile's {{ node.name }}, where hostConfig refuses them.
func Name(required bool) Field {
	return Field{Name: "name", Type: String, Required: required, MaxLength: 200, Pattern: NamePattern,
		Description: "1-200 characters, no leading or trailing space, no control characters"}
}

// NamePattern is a display name: no leading or trailing space, no control
// character.
// The line separators are written as themselves, not as \u escapes: Go's
// regexp, which clients and the schema library may use, has none.
const NamePattern = `^[^\s\x00-\x1f\x7f-\x9f](?:[^\x00-\x1f\x7f-\x9f` + "\u2028\u2029" + `]*[^\s\x00-\x1f\x7f-\x9f])?$`
