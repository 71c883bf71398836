// Package workflows holds provisioning workflows: one run of a profile
// version on one node. A workflow snapshots the profile document and the
// steps it renders to when it is created, so later changes to the profile
// never touch it, and the profile version is used (its document immutable)
// from then on. The node reports its progress step by step with its own
// credential; a node runs one workflow at a time.
package workflows

import (
	"context"
	"database/sql"
	"encoding/json"
	"errors"
	"fmt"
	"time"

	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/errs"
	"github.com/bettercompute/computed/internal/events"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/page"
	"github.com/bettercompute/computed/internal/profiles"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/reqctx"
	"github.com/bettercompute/computed/internal/store"
)

// Cursors is the kind of the workflow lists' cursors (both surfaces).
var Cursors = page.Keyed("workflow", ids.Pattern(ids.Workflow))

// Workflow states.
const (
	Pending   = "pending"
	Running   = "running"
	Succeeded = "succeeded"
	Failed    = "failed"
	Canceled  = "canceled"
)

// Step states besides pending, running, succeeded and failed.
const Skipped = "skipped"

// States are the workflow states, in the order of the list filter's enum.
var States = []string{Pending, Running, Succeeded, Failed, Canceled}

// StepStates are the states of one step.
var StepStates = []string{Pending, Running, Succeeded, Failed, Skipped}

// Names of the closed sets, for the OpenAPI document and the GraphQL enums.
var (
	StateEnum     = registry.DefineEnum("WorkflowState", "pending until the node's first step report; succeeded, failed and canceled are final", States...)
	StepStateEnum = registry.DefineEnum("StepState", "a step runs once every earlier step succeeded; succeeded and failed are final", StepStates...)
)

// Step is one rendered step of a workflow (as profiles.render gives it)
// with its progress.
type Step struct {
	Index      int             `json:"index" doc:"The step's position, from 0."`
	Name       string          `json:"name" doc:"The step's name, as profiles.render gives it."`
	Use        string          `json:"use" doc:"The registered step it runs."`
	Phase      string          `json:"phase" schema:"StepPhase" doc:"The phase it runs in; phases run prepare, install, configure, finalize, in that order."`
	With       json.RawMessage `json:"with" schema:"StepParameters" doc:"The step's parameters."`
	Status     string          `json:"status" schema:"StepState" doc:"A step runs once every earlier step succeeded; it is skipped after a failure, or by a cancel before it started; succeeded and failed are final."`
	StartedAt  *time.Time      `json:"startedAt" doc:"When the node first reported the step; null before that."`
	FinishedAt *time.Time      `json:"finishedAt" doc:"When the step succeeded or failed; null while it has not."`
	Message    *string         `json:"message" doc:"The message of the step's latest report (or of a cancel); null when it had none."`
}

// Workflow is one run of a profile version on one node.
type Workflow struct {
	WorkflowID      string          `json:"workflowId" db:"workflow_id" doc:"The workflow's id (wf_ and a ULID)."`
	TenantID        string          `json:"tenantId" db:"tenant_id" doc:"The tenant that runs the workflow."`
	NodeID          string          `json:"nodeId" db:"node_id" doc:"The node the workflow runs on."`
	ProfileTenantID string          `json:"profileTenantId" db:"profile_tenant_id" doc:"The owner of the profile version (the tenant, another tenant's public profile, or builtin)."`
	ProfileID       string          `json:"profileId" db:"profile_id" doc:"The profile the workflow runs."`
	ProfileVersion  int             `json:"profileVersion" db:"profile_version" doc:"The profile version the workflow runs."`
	ProfileDocument json.RawMessage `json:"profileDocument" db:"-" schema:"ProfileDocument" doc:"The document as it was when the workflow was created."`
	Steps           []Step          `json:"steps" db:"-" doc:"The rendered steps, as they were at create, with each one's progress."`
	State           string          `json:"state" db:"state" schema:"WorkflowState" doc:"Pending until the node's first step report, then running; succeeded, failed and canceled are final."`
	RowVersion      int             `json:"rowVersion" db:"row_version" doc:"The workflow's version, one more at every change: pass it as expectedVersion to change it only if nobody changed it since."`
	CreatedAt       time.Time       `json:"createdAt" db:"created_at" doc:"When the workflow was created."`
	UpdatedAt       time.Time       `json:"updatedAt" db:"updated_at" doc:"When the workflow last changed."`
	FinishedAt      *time.Time      `json:"finishedAt" db:"finished_at" doc:"When the workflow succeeded, failed or was canceled; null while it has not."`

	DocText   string `json:"-" db:"profile_document"`
	StepsText string `json:"-" db:"steps"`
	// unchanged: a step report that changed nothing (no event, no audit
	// record).
	unchanged bool `json:"-" db:"-"`
}

// ReadSize is what reading the workflow spends of a request's read budget
// (store.SelectSpending): its profile's document and its steps.
func (w *Workflow) ReadSize() int { return len(w.DocText) + len(w.StepsText) }

func (w *Workflow) fix() error {
	w.ProfileDocument = json.RawMessage(w.DocText)
	w.Steps = []Step{}
	if err := json.Unmarshal([]byte(w.StepsText), &w.Steps); err != nil {
		return fmt.Errorf("workflow %s: stored steps do not decode: %w", w.WorkflowID, err)
	}
	w.CreatedAt, w.UpdatedAt = w.CreatedAt.UTC(), w.UpdatedAt.UTC()
	if w.FinishedAt != nil {
		t := w.FinishedAt.UTC()
		w.FinishedAt = &t
	}
	return nil
}

// Finished reports a state no step report or cancel can leave.
func Finished(state string) bool { return state != Pending && state != Running }

// Inputs.
type (
	CreateInput struct {
		TenantID       string `json:"tenantId"`
		NodeID         string `json:"nodeId"`
		ProfileID      string `json:"profileId"`
		ProfileVersion *int   `json:"profileVersion,omitempty"`
	}
	RefInput struct {
		TenantID   string `json:"tenantId"`
		WorkflowID string `json:"workflowId"`
	}
	ListInput struct {
		TenantID string `json:"tenantId"`
		NodeID   string `json:"nodeId,omitempty"`
		State    string `json:"state,omitempty"`
		Limit    int    `json:"limit"`
		Cursor   string `json:"cursor,omitempty"`
	}
	CancelInput struct {
		TenantID        string `json:"tenantId"`
		WorkflowID      string `json:"workflowId"`
		ExpectedVersion *int   `json:"expectedVersion,omitempty"`
	}
	ReportStepInput struct {
		NodeID     string  `json:"nodeId"`
		WorkflowID string  `json:"workflowId"`
		Index      int     `json:"index"`
		Status     string  `json:"status"`
		Message    *string `json:"message,omitempty"`
	}
)

const cols = `workflow_id, tenant_id, node_id, profile_tenant_id, profile_id, profile_version,
	profile_document::text AS profile_document, steps::text AS steps, state, row_version, created_at, updated_at, finished_at`

// NodeRemovedMessage is the message of the steps that nodes.remove ends
// when it cancels the node's unfinished workflow.
const NodeRemovedMessage = "canceled: node removed"

// MaxMessage bounds a step report's message (characters).
const MaxMessage = 1024

func notFound(workflowID string) error {
	return errs.E(errs.NotFound, "workflow %s not found", workflowID)
}

func nodeNotFound(nodeID string) error {
	return errs.E(errs.NotFound, "node %s not found", nodeID).With("path", "nodeId")
}

func one(ctx context.Context, q store.Q, query string, args ...any) (*Workflow, error) {
	var w Workflow
	if err := q.GetContext(ctx, &w, query, args...); err != nil {
		return nil, err
	}
	if err := w.fix(); err != nil {
		return nil, err
	}
	return &w, nil
}

// Create starts a workflow of a profile version on one of the tenant's
// nodes: it snapshots the document and the rendered steps and marks the
// version used, in the caller's transaction.
func Create(ctx context.Context, q store.Q, in *CreateInput) (*Workflow, error) {
	// The node: the tenant's own, not removed. The share lock keeps it from
	// being cordoned or removed until this transaction ends.
	// Held first (authz.HoldAuthority): a stream of creates on the node
	// does not keep its removal waiting.
	if err := authz.HoldAuthority(ctx, q, authz.NodeState(in.NodeID)); err != nil {
		return nil, err
	}
	var state string
	err := q.GetContext(ctx, &state, `SELECT state FROM nodes WHERE node_id = $1 AND tenant_id = $2 FOR SHARE`, in.NodeID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) || (err == nil && state == "removed") {
		return nil, nodeNotFound(in.NodeID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if state != "ready" {
		return nil, errs.E(errs.InvalidState, "node %s is %s; only a ready node takes workflows", in.NodeID, state).
			With("path", "nodeId").With("state", state)
	}
	// The profile, locked until commit so that an update of its document
	// cannot slip between the snapshot and the first use.
	p, err := profiles.ForUse(ctx, q, in.TenantID, in.ProfileID, in.ProfileVersion)
	if err != nil {
		return nil, err
	}
	rendered, issues := profiles.Expand(p.Document)
	if len(issues) > 0 {
		return nil, profiles.Unresolved(p, issues, "profileId")
	}
	steps := make([]Step, len(rendered))
	for i, r := range rendered {
		with := json.RawMessage(`{}`)
		if r.With != nil {
			if with, err = json.Marshal(r.With); err != nil {
				return nil, err
			}
		}
		steps[i] = Step{Index: r.Index, Name: r.Name, Use: r.Use, Phase: r.Phase, With: with, Status: Pending}
	}
	stepsJSON, err := json.Marshal(steps)
	if err != nil {
		return nil, err
	}
	w, err := one(ctx, q, `INSERT INTO workflows (workflow_id, tenant_id, node_id, profile_tenant_id, profile_id, profile_version, profile_document, steps)
		VALUES ($1, $2, $3, $4, $5, $6, $7::jsonb, $8::jsonb) RETURNING `+cols,
		ids.New(ids.Workflow), in.TenantID, in.NodeID, p.TenantID, p.ProfileID, p.ProfileVersion, string(p.Document), string(stepsJSON))
	if store.IsUnique(err, "workflows_node_active_key") {
		return nil, errs.E(errs.Conflict, "node %s already runs a workflow; cancel it or wait for it to finish", in.NodeID).With("path", "nodeId")
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if _, err := profiles.MarkUsed(ctx, q, p); err != nil {
		return nil, err
	}
	return w, writeEvent(ctx, q, events.WorkflowCreated, w)
}

// writeEvent writes a workflow's event in the change's transaction. Its
// poolId is its node's pool (a node stays in the pool it joined), as a
// node's own events carry it.
func writeEvent(ctx context.Context, q store.Q, typ string, w *Workflow) error {
	var pool string
	if err := q.GetContext(ctx, &pool, `SELECT pool_id FROM nodes WHERE node_id = $1 AND tenant_id = $2`, w.NodeID, w.TenantID); err != nil {
		return store.Wrap(err)
	}
	data := eventData{Workflow: w, Steps: make([]eventStep, len(w.Steps))}
	for i := range w.Steps {
		data.Steps[i].Step = &w.Steps[i]
	}
	return events.Write(ctx, q, events.Record{TenantID: w.TenantID, Type: typ, ResourceID: w.WorkflowID, PoolID: pool, Data: data})
}

// eventData is a workflow as its events carry it: without its profile
// document nor its steps' parameters, which never change after create and
// can be large (a daemon reporting a step's progress wrote the 108 KB
// document into the stream at every report, and steps that take a
// profile's userData made 602 KB events: probes'). workflows.get and an
// event's workflow link read them.
type eventData struct {
	*Workflow
	ProfileDocument json.RawMessage `json:"profileDocument,omitempty"`
	Steps           []eventStep     `json:"steps"`
}

// eventStep is a step's progress as an event carries it.
type eventStep struct {
	*Step
	With json.RawMessage `json:"with,omitempty"`
}

// saveWith saves a locked workflow and writes its events in order.
func saveWith(ctx context.Context, q store.Q, w *Workflow, types ...string) (*Workflow, error) {
	out, err := save(ctx, q, w)
	if err != nil {
		return nil, err
	}
	for _, t := range types {
		if err := writeEvent(ctx, q, t, out); err != nil {
			return nil, err
		}
	}
	return out, nil
}

// visible is the visibility predicate over workflows w: a workflow is
// visible to its tenant (compute:workflows:read), the owner of its node.
// tenants is a text[] expression.
func visible(tenants string) string { return `w.tenant_id = ANY(` + tenants + `)` }

// Get returns one of the tenant's workflows.
func Get(ctx context.Context, q store.Q, in *RefInput) (*Workflow, error) {
	w, err := one(ctx, q, `SELECT `+cols+` FROM workflows w WHERE workflow_id = $1 AND `+visible("ARRAY[$2]"), in.WorkflowID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(in.WorkflowID)
	}
	return w, store.Wrap(err)
}

// List pages the tenant's workflows by id (creation order), optionally of
// one node and/or in one state.
func List(ctx context.Context, q store.Q, in *ListInput) (*page.Page[Workflow], error) {
	var after string
	if _, err := Cursors.Decode(in.Cursor, &after); err != nil {
		return nil, err
	}
	rows := []Workflow{}
	err := store.SelectSpending(ctx, q, &rows, `SELECT `+cols+` FROM workflows w
		WHERE `+visible("ARRAY[$1]")+` AND ($2 = '' OR node_id = $2) AND ($3 = '' OR state = $3) AND workflow_id > $4
		ORDER BY workflow_id LIMIT $5`, in.TenantID, in.NodeID, in.State, after, in.Limit+1)
	if err != nil {
		return nil, store.Wrap(err)
	}
	for i := range rows {
		if err := rows[i].fix(); err != nil {
			return nil, err
		}
	}
	items, cur := page.Trim(rows, in.Limit, func(w Workflow) string { return Cursors.Encode(w.WorkflowID) })
	return &page.Page[Workflow]{Items: items, Cursor: cur}, nil
}

// lock reads a workflow FOR UPDATE (reports and cancels of one workflow are
// serialized) with the time its step times take (lockedNow).
func lock(ctx context.Context, q store.Q, where string, args ...any) (*Workflow, time.Time, error) {
	var w Workflow
	err := q.GetContext(ctx, &w, `SELECT `+cols+` FROM workflows WHERE `+where+` FOR UPDATE`, args...)
	if err != nil {
		return nil, time.Time{}, err
	}
	if err := w.fix(); err != nil {
		return nil, time.Time{}, err
	}
	now, err := lockedNow(ctx, q)
	return &w, now, err
}

// lockedNow is the time a change of a locked workflow takes: the clock once
// the lock is held, a statement after it, so a change that waited for the
// one before never dates itself before it. (It was the transaction's
// start: a report for step 1 that waited for step 0's success recorded a
// startedAt before step 0's finishedAt.)
func lockedNow(ctx context.Context, q store.Q) (time.Time, error) {
	var now time.Time
	err := q.GetContext(ctx, &now, `SELECT clock_timestamp()`)
	return now.UTC(), store.Wrap(err)
}

// save writes a locked workflow's steps, state and finish time back.
func save(ctx context.Context, q store.Q, w *Workflow) (*Workflow, error) {
	stepsJSON, err := json.Marshal(w.Steps)
	if err != nil {
		return nil, err
	}
	out, err := one(ctx, q, `UPDATE workflows SET steps = $2::jsonb, state = $3, finished_at = $4,
			row_version = row_version + 1, updated_at = clock_timestamp()
		WHERE workflow_id = $1 RETURNING `+cols, w.WorkflowID, string(stepsJSON), w.State, w.FinishedAt)
	return out, store.Wrap(err)
}

func finishedErr(w *Workflow) error {
	return errs.E(errs.InvalidState, "workflow %s is %s", w.WorkflowID, w.State).With("state", w.State)
}

// Cancel stops a pending or running workflow: steps that had not started
// are skipped, a running step is failed, and the node is free for another
// workflow.
func Cancel(ctx context.Context, q store.Q, in *CancelInput) (*Workflow, error) {
	w, now, err := lock(ctx, q, `workflow_id = $1 AND tenant_id = $2`, in.WorkflowID, in.TenantID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(in.WorkflowID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	// A stale expectedVersion first, as for instances and reservations:
	// the repeat of a cancel that was applied is its CONFLICT (the retry
	// errors.md promises is safe), not the finished state's INVALID_STATE.
	if in.ExpectedVersion != nil && *in.ExpectedVersion != w.RowVersion {
		return nil, errs.E(errs.Conflict, "workflow %s is at rowVersion %d, not %d", in.WorkflowID, w.RowVersion, *in.ExpectedVersion).
			With("rowVersion", w.RowVersion)
	}
	if Finished(w.State) {
		return nil, finishedErr(w)
	}
	msg := "canceled while running"
	cancelSteps(w, now, &msg, nil)
	return saveWith(ctx, q, w, events.WorkflowCanceled)
}

// cancelSteps ends a locked unfinished workflow as canceled at now: pending
// steps become skipped (with skippedMsg), a running step failed (with
// runningMsg).
func cancelSteps(w *Workflow, now time.Time, runningMsg, skippedMsg *string) {
	for i := range w.Steps {
		s := &w.Steps[i]
		switch s.Status {
		case Pending:
			s.Status, s.Message = Skipped, skippedMsg
		case Running:
			s.Status, s.FinishedAt, s.Message = Failed, &now, runningMsg
		}
	}
	w.State, w.FinishedAt = Canceled, &now
}

// CancelForRemovedNode cancels the node's pending or running workflow (a
// node runs at most one) in the caller's transaction, the one that removes
// the node and revokes its credential: nothing could report its steps
// afterwards, so it would otherwise stay unfinished forever. Pending steps
// become skipped and a running step failed, each with NodeRemovedMessage,
// and workflow.canceled is written as workflows.cancel writes it.
//
// The rows are locked as ReportStep and Cancel lock them, so a report that
// races the removal either commits first (and is then canceled here, or
// has finished the workflow, which the recheck of the lock skips) or waits
// and finds the workflow canceled (INVALID_STATE). The caller must hold the
// node's row lock, which workflows.create shares, so no workflow can be
// created on the node behind this statement.
func CancelForRemovedNode(ctx context.Context, q store.Q, nodeID string) error {
	var rows []Workflow
	err := q.SelectContext(ctx, &rows, `SELECT `+cols+` FROM workflows
		WHERE node_id = $1 AND state = ANY($2::text[]) ORDER BY workflow_id FOR UPDATE`, nodeID, []string{Pending, Running})
	if err != nil {
		return store.Wrap(err)
	}
	if len(rows) == 0 {
		return nil
	}
	now, err := lockedNow(ctx, q)
	if err != nil {
		return err
	}
	msg := NodeRemovedMessage
	for i := range rows {
		w := &rows[i]
		if err := w.fix(); err != nil {
			return err
		}
		cancelSteps(w, now, &msg, &msg)
		if _, err := saveWith(ctx, q, w, events.WorkflowCanceled); err != nil {
			return err
		}
	}
	return nil
}

// ReportStep records a node's report on one step of its workflow. Steps
// run in order: a step may start (or finish) only when every earlier step
// succeeded. The first report moves the workflow to running; the last step
// succeeding finishes it as succeeded; a failed step fails it and skips the
// steps after it.
func ReportStep(ctx context.Context, q store.Q, in *ReportStepInput) (*Workflow, error) {
	w, now, err := lock(ctx, q, `workflow_id = $1 AND node_id = $2`, in.WorkflowID, in.NodeID)
	if errors.Is(err, sql.ErrNoRows) {
		return nil, notFound(in.WorkflowID)
	}
	if err != nil {
		return nil, store.Wrap(err)
	}
	if Finished(w.State) {
		return nil, finishedErr(w)
	}
	if in.Index >= len(w.Steps) {
		return nil, errs.Invalid("index", "workflow %s has %d steps (index 0-%d)", w.WorkflowID, len(w.Steps), len(w.Steps)-1)
	}
	for i := 0; i < in.Index; i++ {
		if p := w.Steps[i]; p.Status != Succeeded {
			return nil, errs.E(errs.InvalidState, "step %d (%s) is %s; step %d runs only after every earlier step succeeded",
				i, p.Name, p.Status, in.Index).With("path", "index").With("step", i).With("stepStatus", p.Status)
		}
	}
	s := &w.Steps[in.Index]
	if s.Status != Pending && s.Status != Running {
		return nil, errs.E(errs.InvalidState, "step %d (%s) is already %s", in.Index, s.Name, s.Status).
			With("path", "index").With("step", in.Index).With("stepStatus", s.Status)
	}
	if s.Status == Running && in.Status == Running && equalText(s.Message, in.Message) {
		// The step's report again (a daemon's heartbeat): nothing changes,
		// as an equal inventory.report or instances.report changes nothing.
		w.unchanged = true
		return w, nil
	}
	if s.StartedAt == nil {
		s.StartedAt = &now
	}
	s.Status, s.Message = in.Status, in.Message
	if in.Status != Running {
		s.FinishedAt = &now
	}
	w.State = Running
	switch {
	case in.Status == Failed:
		for i := in.Index + 1; i < len(w.Steps); i++ {
			w.Steps[i].Status = Skipped
		}
		w.State, w.FinishedAt = Failed, &now
	case in.Status == Succeeded && in.Index == len(w.Steps)-1:
		w.State, w.FinishedAt = Succeeded, &now
	}
	types := []string{events.WorkflowStep}
	switch w.State {
	case Failed:
		types = append(types, events.WorkflowFailed)
	case Succeeded:
		types = append(types, events.WorkflowSucceeded)
	}
	return saveWith(ctx, q, w, types...)
}

func equalText(a, b *string) bool {
	return (a == nil) == (b == nil) && (a == nil || *a == *b)
}

// locateNode names the node the calling node principal reports on: the
// decision gives the node's own credential compute:workflows:report on
// compute-node/{nodeId} and nothing on any other node.
func locateNode(ctx context.Context, _ store.Q, in *ReportStepInput) (authz.Resource, error) {
	r := authz.Resource{Type: authz.Node, ID: in.NodeID}
	if p := reqctx.PrincipalFrom(ctx); p != nil {
		r.TenantID = p.TenantID
	}
	return r, nil
}

// Group describes the workflows group.
var Group = registry.Group{Name: "workflows", Summary: "A workflow runs one profile version on one of the tenant's nodes. It snapshots the profile document and the steps the profile renders to when it is created, so later updates or deletes of the profile never change it, and the profile version is `used` (its document immutable) from then on. The node reports each step's progress with its own credential; steps run in order, and a node runs one workflow at a time."}

// Methods are the workflows group's registry entries.
func Methods() []registry.Method {
	m := func(name string, kind registry.Kind, perm authz.Permission, res, summary string, notes []string, in ...registry.Field) registry.Method {
		return registry.Method{Group: "workflows", Name: name, Kind: kind, Permission: perm, Resource: res,
			Summary: summary, Notes: notes, Module: "bare-metal", Phase: "v0.2", Input: in}
	}
	ref := func(more ...registry.Field) []registry.Field {
		return append([]registry.Field{registry.TenantID(), registry.ID("workflowId", ids.Workflow)}, more...)
	}
	nodeID := registry.ID("nodeId", ids.Node)
	nodeFilter := nodeID
	nodeFilter.Required, nodeFilter.Description = false, "only the workflows of this node"
	expected := registry.ExpectedVersion()
	list := m("list", registry.Read, authz.WorkflowsRead, authz.Tenant,
		"Returns a page of the tenant's workflows, ordered by id (creation order), optionally only those of one node or in one state.",
		[]string{"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
		registry.TenantID(), nodeFilter,
		func() registry.Field {
			f := registry.EnumField("state", StateEnum, false)
			f.Description = "only the workflows in this state"
			return f
		}(),
		registry.PageLimit(), registry.Cursor())
	list.Items = true
	report := m("reportStep", registry.Mutation, authz.WorkflowsReport, authz.Node,
		"Records the node's report on one step of its workflow and returns the workflow.",
		[]string{"Decided as `compute:workflows:report` on `compute-node/{nodeId}`, which only the node's own credential holds: any other credential is `PERMISSION_DENIED`, as is a node credential naming another node (or a removed one).",
			"Steps run in order: a step may start or finish only when every earlier step succeeded, and a step that succeeded or failed is final (`INVALID_STATE`). `running` again on a running step replaces its message; with the same message it changes nothing (no `workflow.step` event, no audit record, the same `rowVersion`).",
			"The first report moves the workflow from `pending` to `running`; the last step succeeding makes it `succeeded`; a `failed` step makes it `failed` and skips the steps after it.",
			"A step's `message` is the one of its latest report (null when that report has none).",
			"Reporting on a finished or canceled workflow is `INVALID_STATE`; a workflow that is not this node's is `NOT_FOUND`; an `index` past the last step is `INVALID_INPUT`."},
		nodeID, registry.ID("workflowId", ids.Workflow),
		registry.Field{Name: "index", Type: registry.Integer, Required: true, Min: registry.Int(0), Max: registry.Int(10000),
			Description: "the step's index in `steps`"},
		registry.Field{Name: "status", Type: registry.String, Required: true, Enum: []string{Running, Succeeded, Failed}},
		registry.Field{Name: "message", Type: registry.String, MaxLength: MaxMessage, Description: "what the node says about the step"})
	report.Credential = registry.NodeCred
	report.Quiet = func(out any) bool { w, ok := out.(*Workflow); return ok && w.unchanged }
	return []registry.Method{
		registry.Def(m("create", registry.Mutation, authz.WorkflowsManage, authz.Tenant,
			"Starts a workflow of a profile version on one of the tenant's nodes and returns it, with the profile document and the rendered steps snapshotted and every step `pending`.",
			[]string{"The profile resolves like `profiles.get`: the tenant's own, then a public stored one, then one a module ships; the latest version when `profileVersion` is omitted. `NOT_FOUND` when none matches.",
				"A profile that does not render is `INVALID_INPUT` with `details.path` `profileId` and the problems in `details.issues` (as `profiles.render` gives them).",
				"The node must be one the tenant owns and not removed (`NOT_FOUND` otherwise); a cordoned node is `INVALID_STATE`. A node runs one workflow at a time: `CONFLICT` while another is pending or running on it.",
				"From then on the profile version is `used`: its document can no longer change. The first use bumps the stored version's `rowVersion` and `updatedAt`. An update of the document that races the first use either commits first (and the workflow snapshots the new document) or is refused with `INVALID_STATE`."},
			registry.TenantID(), nodeID, profiles.IDField(), profiles.VersionField(false)), nil, Create).WithAuditOutput("workflowId", "profileVersion").WithAuditFields("profileVersion"),
		registry.Def(m("get", registry.Read, authz.WorkflowsRead, authz.Tenant,
			"Returns one of the tenant's workflows.",
			[]string{"`NOT_FOUND` when the tenant has no such workflow."}, ref()...), nil, Get),
		registry.Def(list, nil, List),
		registry.Def(m("cancel", registry.Mutation, authz.WorkflowsManage, authz.Tenant,
			"Cancels a pending or running workflow and returns it; the node is free for another workflow.",
			[]string{"Steps that had not started become `skipped`; a running step becomes `failed` with the message `canceled while running`.",
				"`nodes.remove` cancels its node's pending or running workflow the same way, in the removal's transaction (a removed node's credential is revoked, so nothing else could end it): steps that had not started become `skipped` and a running step `failed`, each with the message `" + NodeRemovedMessage + "`.",
				"A finished (succeeded, failed or canceled) workflow is `INVALID_STATE`.",
				"`expectedVersion` is the workflow's rowVersion; a mismatch is `CONFLICT`.",
				"`NOT_FOUND` when the tenant has no such workflow."},
			ref(expected)...), nil, Cancel),
		registry.Def(report, locateNode, ReportStep),
	}
}

type nodeRow struct {
	Parent string `db:"parent_key"`
	Total  int    `db:"total_count"`
	Workflow
}

// PagesByNode returns one page of each node's workflows visible in scope,
// by id, in one statement.
func PagesByNode(ctx context.Context, q store.Q, scope authz.Scope, nodeIDs []string, after string, limit int) (page.Rows[Workflow], error) {
	var rows []nodeRow
	err := store.SelectSpending(ctx, q, &rows, `
		WITH t AS MATERIALIZED (
			SELECT t.parent, (SELECT count(*) FROM workflows w WHERE w.node_id = t.parent AND `+authz.Where("$4", visible)+`) AS total_count
			FROM unnest($1::text[]) AS t(parent))
		SELECT t.parent AS parent_key, t.total_count,
		       x.*
		FROM t
		CROSS JOIN LATERAL (
			SELECT `+cols+` FROM workflows w WHERE w.node_id = t.parent AND w.workflow_id > $2 AND `+authz.Where("$4", visible)+`
			ORDER BY w.workflow_id LIMIT $3
		) x`, nodeIDs, after, limit+1, scope.Arg())
	var r page.Rows[Workflow]
	if err != nil {
		return r, store.Wrap(err)
	}
	for _, x := range rows {
		if err := x.Workflow.fix(); err != nil {
			return page.Rows[Workflow]{}, err
		}
		r.Parents, r.Totals, r.Items = append(r.Parents, x.Parent), append(r.Totals, x.Total), append(r.Items, x.Workflow)
	}
	return r, nil
}

// CountByNode counts each node's workflows.
func CountByNode(ctx context.Context, q store.Q, scope authz.Scope, nodeIDs []string) (map[string]int, error) {
	return store.CountBy(ctx, q, `SELECT t.parent AS k,
			(SELECT count(*) FROM workflows w WHERE w.node_id = t.parent AND `+authz.Where("$2", visible)+`) AS n
		FROM unnest($1::text[]) AS t(parent)`, nodeIDs, scope.Arg())
}

// ByIDs loads the workflows of ids visible in scope in one statement,
// keyed by id.
func ByIDs(ctx context.Context, q store.Q, scope authz.Scope, ids []string) (map[string]*Workflow, error) {
	var rows []Workflow
	if err := store.SelectSpending(ctx, q, &rows, `SELECT `+cols+` FROM workflows w WHERE workflow_id = ANY($1) AND `+authz.Where("$2", visible),
		ids, scope.Arg()); err != nil {
		return nil, store.Wrap(err)
	}
	out := make(map[string]*Workflow, len(rows))
	for i := range rows {
		if err := rows[i].fix(); err != nil {
			return nil, err
		}
		out[rows[i].WorkflowID] = &rows[i]
	}
	return out, nil
}
