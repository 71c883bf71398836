package nodes

import (
	"context"
	"database/sql"
	"encoding/base64"
	"errors"
	"strconv"

	"github.com/bettercompute/computed/internal/audit"
	"github.com/bettercompute/computed/internal/auth"
	"github.com/bettercompute/computed/internal/authz"
	"github.com/bettercompute/computed/internal/ids"
	"github.com/bettercompute/computed/internal/pki"
	"github.com/bettercompute/computed/internal/registry"
	"github.com/bettercompute/computed/internal/store"
	"github.com/bettercompute/computed/internal/workflows"
)

// service holds what the handlers share: the CA, loaded once per registry.
type service struct{ ca *caSource }

// EnsureCA loads the control plane's CA, creating and persisting it the
// first time any replica starts.
func EnsureCA(ctx context.Context, db *store.DB) (*pki.CA, error) { return pki.Load(ctx, db) }

// Groups of this package, in docs order.
var (
	JoinTokensGroup   = registry.Group{Name: "joinTokens", Summary: "Join tokens let machines join a pool: a token has a lifetime and a number of uses, its secret is shown once when it is created and stored only as a hash. Only the pool's owner manages them; decisions are made on `compute-pool/{poolId}`."}
	MachinesGroup     = registry.Group{Name: "machines", Summary: "The machines the `discovery` attestor expects in a pool, registered by the pool's owner by system UUID, serial or MAC. A join through `discovery` is admitted when one of the machine's ids matches and deferred into a join request otherwise."}
	TPMKeysGroup      = registry.Group{Name: "tpmKeys", Summary: "A pool's allow-list for the `tpm` attestor: endorsement keys, by the SHA-256 (hex) of the key's DER SubjectPublicKeyInfo, and CA certificates (a TPM manufacturer's root or intermediate), by the SHA-256 of the certificate's DER, which allow every endorsement key whose EK certificate chains to them. A join through the `tpm` attestor proves that the machine holds the TPM (credential activation); one whose endorsement key is not allowed is then deferred into a join request. See [Joining nodes](../guides/nodes/joining.md)."}
	NodesGroup        = registry.Group{Name: "nodes", Summary: "Nodes are the machines admitted into pools. A machine joins with a join token, a PEM CSR, its hardware identity and an attestor (`token`, `discovery`, `tpm`); it is admitted with a certificate signed by the control plane's CA and a node credential, or deferred into a join request. A node belongs to the tenant that owns its pool; tenants the pool is offered to do not see its nodes. See [Joining nodes](../guides/nodes/joining.md)."}
	JoinRequestsGroup = registry.Group{Name: "joinRequests", Summary: "Join requests are the approval queue for joins an attestor deferred: a machine with placeholder hardware identifiers, a machine the `discovery` attestor did not know, or a TPM whose endorsement key is not allowed (the machine proved it holds that TPM: `ekProven`). An approval admits exactly one join, which the machine's retry with the same CSR through the same attestor consumes (a `tpm` retry answers a new challenge from the same TPM). The group is decided on `compute-pool/{poolId}` with the join-token actions. See [Joining nodes](../guides/nodes/joining.md)."}
)

// b64Pattern is standard, padded base64.
const b64Pattern = `^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/]{2}==|[A-Za-z0-9+/]{3}=)?$`

// Attestors and join token states.
const (
	AttestorToken     = "token"
	AttestorDiscovery = "discovery"
	AttestorTPM       = "tpm"

	TokenActive    = "active"
	TokenExhausted = "exhausted"
	TokenExpired   = "expired"
	TokenRevoked   = "revoked"
)

// Closed sets of nodes and joins, named for the OpenAPI document and the
// GraphQL enums.
var (
	StateEnum      = registry.DefineEnum("NodeState", "ready nodes take work; cordoned ones take no new work; removed ones have lost their credential", Ready, Cordoned, Removed)
	AttestorEnum   = registry.DefineEnum("Attestor", "how a join is attested: the token alone, a machine the pool's owner registered, or a TPM the machine proves it holds, whose endorsement key is allowed", AttestorToken, AttestorDiscovery, AttestorTPM)
	JoinStatusEnum = registry.DefineEnum("JoinStatus", "admitted with a node, deferred into a join request, or (the tpm attestor's first call) a challenge for the TPM to answer", "admitted", Pending, StatusChallenge)
	KeyKindEnum    = registry.DefineEnum("TpmKeyKind", "an endorsement key, or a CA certificate EK certificates chain to", KeyKindEK, KeyKindCA)
	ReqStateEnum   = registry.DefineEnum("JoinRequestState", "a pending request waits for a decision (7 days); an approved one for the machine's retry (24 hours)", Pending, Approved, Consumed, Denied, Expired)
	ReasonEnum     = registry.DefineEnum("JoinReasonCode", "why a join was deferred", ReasonPlaceholder, ReasonUnknown, ReasonEKNotAllowed)
	TokenStateEnum = registry.DefineEnum("JoinTokenState", "only an active join token admits", TokenActive, TokenExhausted, TokenExpired, TokenRevoked)
	HardwareSchema = registry.DefineSchemaOf[Hardware]("NodeHardware")
	ReasonsSchema  = registry.DefineSchemaOf[[]Reason]("JoinReasons")
)

// locateBy names the pool a row of table belongs to, for methods that take
// the row's id rather than the pool's: the decision is on the pool.
func locateBy(table, idCol, label string, id func(in any) (string, string)) func(ctx context.Context, q store.Q, in any) (authz.Resource, error) {
	return func(ctx context.Context, q store.Q, in any) (authz.Resource, error) {
		tenantID, rowID := id(in)
		var poolID string
		err := q.GetContext(ctx, &poolID, `SELECT pool_id FROM `+table+` WHERE `+idCol+` = $1`, rowID)
		if err != nil && !errors.Is(err, sql.ErrNoRows) {
			return authz.Resource{}, store.Wrap(err)
		}
		return authz.Resource{Type: authz.Pool, TenantID: tenantID, ID: poolID, Label: label + " " + rowID}, nil
	}
}

func typed[In any](f func(ctx context.Context, q store.Q, in any) (authz.Resource, error)) func(ctx context.Context, q store.Q, in *In) (authz.Resource, error) {
	return func(ctx context.Context, q store.Q, in *In) (authz.Resource, error) { return f(ctx, q, in) }
}

// Methods are the registry entries of join tokens, expected machines, TPM
// keys, nodes and join requests. db may be nil when only documents are
// rendered.
func Methods(db *store.DB) []registry.Method {
	s := &service{ca: &caSource{db: db, load: pki.Load}}
	m := func(group, name string, kind registry.Kind, perm authz.Permission, res, summary string, notes []string, in ...registry.Field) registry.Method {
		return registry.Method{Group: group, Name: name, Kind: kind, Permission: perm, Resource: res,
			Summary: summary, Notes: notes, Module: "nodes", Phase: "v0.2", Input: in}
	}
	pool := func(more ...registry.Field) []registry.Field {
		return append([]registry.Field{registry.TenantID(), registry.ID("poolId", ids.Pool)}, more...)
	}
	node := func(more ...registry.Field) []registry.Field {
		return append([]registry.Field{registry.TenantID(), registry.ID("nodeId", ids.Node)}, more...)
	}
	pageFields := []registry.Field{registry.PageLimit(), registry.Cursor()}
	expected := registry.ExpectedVersion()
	mac := registry.Field{Name: "mac", Type: registry.String, Pattern: `^[0-9A-Fa-f]{2}(:[0-9A-Fa-f]{2}){5}$`,
		Description: "a MAC address, aa:bb:cc:dd:ee:ff"}
	uuid := registry.Field{Name: "systemUuid", Type: registry.String, Pattern: `^[0-9A-Fa-f]{8}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{4}-?[0-9A-Fa-f]{12}$`,
		Description: "the SMBIOS system UUID"}
	serial := registry.Field{Name: "serial", Type: registry.String, MaxLength: 128, Pattern: `^[\x20-\x7E]*$`,
		Description: "the system serial number (printable ASCII)"}
	ownerOnly := "Only the pool's owner may call it; a pool the tenant does not own is `NOT_FOUND`."
	labels := registry.Field{Name: "labels", Type: registry.Object, Open: true, Schema: LabelsSchema,
		Description: "label keys (prefix/name) to values, at most 64"}
	nodeState := registry.EnumField("state", StateEnum, false)
	reqState := registry.EnumField("state", ReqStateEnum, false)

	joinTokenID := func(in any) (string, string) { x := in.(*JoinTokenRefInput); return x.TenantID, x.JoinTokenID }
	machineID := func(in any) (string, string) { x := in.(*MachineRefInput); return x.TenantID, x.MachineID }
	joinReqID := func(in any) (string, string) { x := in.(*JoinRequestRefInput); return x.TenantID, x.JoinRequestID }
	denyID := func(in any) (string, string) { x := in.(*DenyInput); return x.TenantID, x.JoinRequestID }
	denyM := m("joinRequests", "deny", registry.Mutation, authz.JoinRequestsApprove, authz.Pool,
		"Denies a pending or approved join request: it admits nothing.",
		[]string{"A consumed, denied or expired request is `INVALID_STATE`.",
			"`reason` (optional) is kept on the request (`denyReason`) and in the audit record.", ownerOnly},
		registry.TenantID(), registry.ID("joinRequestId", ids.JoinRequest),
		registry.Field{Name: "reason", Type: registry.String, MaxLength: 500, Pattern: `^\S(?:[\s\S]*\S)?$`,
			Description: "why the request is denied (1-500 characters)"})
	denyM.AuditFields = []string{"reason"}
	deny := registry.Def(denyM, typed[DenyInput](locateBy("join_requests", "join_request_id", "join request", denyID)), DenyJoinRequest)

	nodeList := m("nodes", "list", registry.Read, authz.NodesRead, authz.Tenant,
		"Returns a page of the tenant's nodes ordered by id, filtered by pool, state and labels.",
		[]string{"Removed nodes are listed only when `state` is `removed`.",
			"`labels` keeps the nodes that carry every label given.",
			"`limit` defaults to 50 and is at most 200; pass the returned cursor to read the next page."},
		append([]registry.Field{registry.TenantID(),
			{Name: "poolId", Type: registry.String, Pattern: ids.Pattern(ids.Pool)}, nodeState, labels}, pageFields...)...)
	nodeList.Items = true

	join := m("nodes", "join", registry.Mutation, "", authz.Pool,
		"Joins a machine to the join token's pool: admitted with a node, a certificate and a credential, or deferred into a join request.",
		[]string{"The join token in the input is the credential: unknown, revoked or expired tokens, and used-up ones for a new join, are `UNAUTHENTICATED`, and each is a failed authentication: it spends the client address's failed-authentication budget as an unknown bearer token does, and past it the answer is `RATE_LIMITED` with `Retry-After`. A join whose token authenticates spends none of it. An `Authorization` header is not read (a daemon re-joining may still send its removed node's credential); the call is rated as one without a token, by client address.",
			"`csr` is a PEM PKCS #10 request whose signature verifies (ECDSA P-256/P-384, Ed25519 or RSA 2048-8192); the certificate is issued for its key by the control plane's CA.",
			"Attestors: `token` admits on the token alone; `discovery` admits a machine the pool owner registered (`machines.register`) by system UUID, serial or MAC; `tpm` admits a machine that proves it holds the TPM whose endorsement key is allowed (`tpmKeys.allow`: by the key's SHA-256, or by a CA its `ekCertificate` chains to).",
			"The `tpm` attestor is two calls (credential activation). The first sends `evidence: {ekPublicKey, akPublic, ekCertificate?}`: the EK (PEM, RSA 2048 or ECC P-256) and the attestation key's TPMT_PUBLIC (base64; a restricted signing key with fixedTPM, fixedParent and sensitiveDataOrigin, RSA 2048 or ECC P-256 with a signing scheme and no symmetric algorithm, name algorithm SHA-256, no reserved attribute bit; anything else is `INVALID_INPUT` naming the field). It is answered `{status: challenge, challengeId, credentialBlob, encryptedSecret, expiresAt}`: base64 of the TPM2B_ID_OBJECT and TPM2B_ENCRYPTED_SECRET (2-byte big-endian size first) that TPM2_ActivateCredential takes, with the AK as the activated object and the EK as the key. It spends no use of the token.",
			"The second call sends the same `joinToken`, `csr` and `hardware` with `evidence: {challengeId, activatedSecret}` (base64 of the recovered secret) and is admitted or deferred like any join. A challenge takes one answer within 5 minutes and is bound to the join token, the CSR, the hardware ids, the EK and the AK (which the answer may repeat): an unknown, answered or expired challenge, a mismatch, or a wrong secret is `UNAUTHENTICATED` (`details.reason`: `challenge-unknown`, `challenge-used`, `challenge-expired`, `challenge-mismatch`, `wrong-secret`) and spends the challenge; so does any other refusal of an answer that proved the TPM (the TPM or machine already joined, the token used up, a request made for another machine): the same answer again is `challenge-used`. A join token has at most 32 unanswered challenges; past that the first call is `RATE_LIMITED` until the oldest expires.",
			"A join is deferred into a join request (`status: pending`, with `reasons`) when the hardware ids are placeholders, when `discovery` does not know the machine, or when the proven endorsement key is not allowed (the request's `ekProven` says the TPM was proven). Retrying with the same CSR returns the same pending request (for `tpm`, after a new challenge); once approved, the retry with the same CSR is admitted exactly once (for `tpm`, from the TPM with the request's endorsement key); a denied request is `PERMISSION_DENIED`. A pending or approved request is for the join that made it: the same CSR through another attestor, with other hardware ids (system UUID, serial or MACs; MACs in any order), or for `tpm` from another TPM, is `PERMISSION_DENIED` (`details.joinRequestId`) and consumes nothing. The owner's approval is the decision: the retry it admits spends no use of the token and is let in when the token has no uses left (a join token's `uses` counts the joins it admitted by itself). A retry with the CSR of a node it admitted is `CONFLICT`, used-up token or not. A deferral spends no use, so a join token holds at most " + strconv.Itoa(MaxPendingRequests) + " pending, unexpired join requests: past that, a join it would defer is `RATE_LIMITED` (`details.reason: \"pending-requests\"`, `details.limit`, `details.retryAfterSeconds`: until the oldest expires, at most 300) until the owner approves or denies one; retries of a pending request are answered as before.",
			"A CSR key that a live node holds, a system UUID of a live node of the tenant (but a placeholder UUID, all zeros or all `F`s, which names no machine: such a join waits for approval instead), or for `tpm` the endorsement key of a live node of the tenant, is `CONFLICT` (`details.nodeId` names the node when it is the tenant's: a CSR key is one live node's on the whole platform, whatever CSR carries it, a new subject or signature included, and another tenant's node is not named), also when the same machine joins at once through several tokens: one machine is one live node of a tenant. An archived pool is `INVALID_STATE`.",
			"`credential` is the node's bearer token, shown only here: it may report the node's own inventory and workflow steps and, for a host of a hosted VPS pool, read and report the instances placed on it (`instances.assigned`, `instances.report`); it reads nothing else of the tenant."},
		registry.Field{Name: "joinToken", Type: registry.String, Required: true, MaxLength: 512, Description: "the join token's secret"},
		registry.Field{Name: "csr", Type: registry.String, Required: true, MaxLength: 16384, Description: "PEM PKCS #10 certificate request"},
		registry.Field{Name: "hardware", Type: registry.Object, Required: true, Fields: []registry.Field{
			func() registry.Field { f := uuid; f.Required = true; return f }(),
			func() registry.Field { f := serial; f.Required = true; return f }(),
			{Name: "macs", Type: registry.Array, MaxItems: 64, Items: &mac},
		}},
		registry.EnumField("attestor", AttestorEnum, true),
		registry.Field{Name: "evidence", Type: registry.Object, Description: "the tpm attestor's evidence: the keys on the first call, the answer to the challenge on the second",
			Fields: []registry.Field{
				{Name: "ekPublicKey", Type: registry.String, MaxLength: 8192, Description: "first call: the TPM's endorsement public key, PEM (RSA 2048 or ECC P-256)"},
				{Name: "akPublic", Type: registry.String, MaxLength: 2048, Pattern: b64Pattern,
					Description: "first call: the attestation key's public area (TPMT_PUBLIC), base64"},
				{Name: "ekCertificate", Type: registry.String, MaxLength: 16384,
					Description: "first call, optional: the EK certificate, PEM, then any intermediate CA certificates"},
				{Name: "challengeId", Type: registry.String, Pattern: ids.Pattern(ids.Challenge), Description: "second call: the challenge answered"},
				{Name: "activatedSecret", Type: registry.String, MaxLength: base64.StdEncoding.EncodedLen(pki.MaxActivatedSecret), Pattern: b64Pattern,
					Description: "second call: the secret TPM2_ActivateCredential recovered, base64"},
			}},
		registry.Name(false))
	join.Credential = registry.JoinToken
	join.MaxBody = 64 << 10

	return []registry.Method{
		registry.Def(m("joinTokens", "create", registry.Mutation, authz.JoinTokensManage, authz.Pool,
			"Creates a join token for a pool and returns it with its secret, shown only here.",
			[]string{"`ttlSeconds` defaults to 3600 and is at most 2592000 (30 days); `maxUses` defaults to 1 and is at most 10000.",
				"An archived pool is `INVALID_STATE`.", ownerOnly},
			pool(registry.Field{Name: "ttlSeconds", Type: registry.Integer, Min: registry.Int(60), Max: registry.Int(MaxTokenTTL), Default: int64(DefaultTokenTTL)},
				registry.Field{Name: "maxUses", Type: registry.Integer, Min: registry.Int(1), Max: registry.Int(MaxTokenUses), Default: int64(1)})...),
			nil, CreateJoinToken).WithAuditOutput("joinToken.joinTokenId"),
		registry.Def(m("joinTokens", "list", registry.Read, authz.JoinTokensRead, authz.Pool,
			"Returns a page of a pool's join tokens ordered by id, with their state (active, exhausted, expired, revoked).",
			[]string{"`limit` defaults to 50 and is at most 200.", ownerOnly}, pool(pageFields...)...), nil, ListJoinTokens),
		registry.Def(m("joinTokens", "revoke", registry.Mutation, authz.JoinTokensManage, authz.Pool,
			"Revokes a join token; it admits nothing from then on.",
			[]string{"Revoking a revoked token is `INVALID_STATE`.", ownerOnly},
			registry.TenantID(), registry.ID("joinTokenId", ids.JoinToken)),
			typed[JoinTokenRefInput](locateBy("join_tokens", "join_token_id", "join token", joinTokenID)), RevokeJoinToken),

		registry.Def(m("machines", "register", registry.Mutation, authz.NodesManage, authz.Pool,
			"Registers a machine the discovery attestor admits into the pool.",
			[]string{"Pass at least one of `systemUuid`, `serial`, `mac`; a placeholder UUID or serial is `INVALID_INPUT`.",
				"Registering the same ids again (the same `systemUuid`, `serial` and `mac`, each given or not) answers the machine already registered, with its `machineId`: no second entry, however many calls race.",
				"An archived pool is `INVALID_STATE`.", ownerOnly},
			pool(func() registry.Field { f := uuid; return f }(), func() registry.Field { f := serial; f.Pattern = `^[\x21-\x7E](?:[\x20-\x7E]*[\x21-\x7E])?$`; return f }(), mac)...),
			nil, RegisterMachine).WithAuditOutput("machineId"),
		registry.Def(m("machines", "list", registry.Read, authz.NodesRead, authz.Pool,
			"Returns a page of the machines a pool expects, ordered by id.",
			[]string{"`limit` defaults to 50 and is at most 200.", ownerOnly}, pool(pageFields...)...), nil, ListMachines),
		registry.Def(m("machines", "forget", registry.Mutation, authz.NodesManage, authz.Pool,
			"Forgets an expected machine; nodes it already admitted stay.", []string{ownerOnly},
			registry.TenantID(), registry.ID("machineId", ids.Machine)),
			typed[MachineRefInput](locateBy("expected_machines", "machine_id", "machine", machineID)), ForgetMachine),

		registry.Def(m("tpmKeys", "allow", registry.Mutation, authz.NodesManage, authz.Pool,
			"Puts a TPM endorsement key on the pool's allow-list, by hash or by PEM public key, or a CA certificate that allows every endorsement key whose EK certificate chains to it.",
			[]string{"Pass exactly one of `ekHash` (64 lowercase hex), `ekPublicKey` (PEM `PUBLIC KEY`: RSA 2048 or ECC P-256, the endorsement keys the `tpm` attestor challenges) and `caCertificate` (one PEM `CERTIFICATE` with basicConstraints cA: a TPM manufacturer's root or intermediate).",
				"A CA entry's `ekHash` is the SHA-256 of the certificate's DER; a machine's `evidence.ekCertificate` (with its intermediates) must chain to it when the machine is challenged.",
				"An entry already on the list is `CONFLICT`; an archived pool is `INVALID_STATE`.", ownerOnly},
			pool(registry.Field{Name: "ekHash", Type: registry.String, Pattern: `^[0-9a-f]{64}$`},
				registry.Field{Name: "ekPublicKey", Type: registry.String, MaxLength: 8192},
				registry.Field{Name: "caCertificate", Type: registry.String, MaxLength: 16384},
				registry.Field{Name: "description", Type: registry.String, MaxLength: 200})...),
			nil, AllowKey).WithAuditFields("ekHash").WithAuditOutput("ekHash", "kind"),
		registry.Def(m("tpmKeys", "list", registry.Read, authz.NodesRead, authz.Pool,
			"Returns a page of the pool's allowed endorsement keys, ordered by hash.",
			[]string{"`limit` defaults to 50 and is at most 200.", ownerOnly}, pool(pageFields...)...), nil, ListKeys),
		registry.Def(m("tpmKeys", "disallow", registry.Mutation, authz.NodesManage, authz.Pool,
			"Takes an endorsement key or a CA certificate (by its `ekHash`) off the pool's allow-list.", []string{"`NOT_FOUND` when it is not on it.", ownerOnly},
			pool(registry.Field{Name: "ekHash", Type: registry.String, Required: true, Pattern: `^[0-9a-f]{64}$`})...),
			nil, DisallowKey).WithAuditFields("ekHash"),

		registry.WithHolder(registry.Def(join, nil, s.join), joinHolder).WithAuditOutput("joinRequestId", "challengeId"),
		registry.Def(m("nodes", "get", registry.Read, authz.NodesRead, authz.Node,
			"Returns one of the tenant's nodes.",
			[]string{"`NOT_FOUND` when the node is not owned by the tenant (tenants a pool is offered to do not see its nodes)."}, node()...), nil, GetNode),
		registry.Def(nodeList, nil, ListNodes),
		registry.Def(m("nodes", "update", registry.Mutation, authz.NodesManage, authz.Node,
			"Changes a node's name and/or labels (labels are replaced as a whole) and returns it.",
			[]string{"Pass `name`, `labels` or both; neither is `INVALID_INPUT`.", "A removed node is `INVALID_STATE`.",
				"Values equal to the node's change nothing: the node comes back with the same `rowVersion` and no `node.updated` event is written."},
			node(registry.Name(false), labels, expected)...), nil, UpdateNode),
		registry.Def(m("nodes", "cordon", registry.Mutation, authz.NodesManage, authz.Node,
			"Cordons a ready node: no new work lands on it.",
			[]string{"A node that is not `ready` is `INVALID_STATE`."}, node(expected)...), nil, Cordon),
		registry.Def(m("nodes", "uncordon", registry.Mutation, authz.NodesManage, authz.Node,
			"Returns a cordoned node to ready.",
			[]string{"A node that is not `cordoned` is `INVALID_STATE`."}, node(expected)...), nil, Uncordon),
		registry.Def(m("nodes", "remove", registry.Mutation, authz.NodesManage, authz.Node,
			"Removes a node: its credential is revoked at once; its inventory history stays readable.",
			[]string{"Removing a removed node is `INVALID_STATE`.",
				"The node's pending or running workflow is canceled in the same transaction (`workflow.canceled`; see `workflows.cancel`): nothing could report its steps afterwards. Its steps that had not started become `skipped` and a running step `failed`, each with the message `" + workflows.NodeRemovedMessage + "`. A step report that races the removal either commits first or finds the workflow `canceled`; no workflow of a removed node is left pending or running."},
			node(expected)...), nil, RemoveNode),

		registry.Def(m("joinRequests", "list", registry.Read, authz.JoinTokensRead, authz.Pool,
			"Returns a page of a pool's join requests ordered by id, optionally in one state.",
			[]string{"States: `pending`, `approved`, `consumed`, `denied`, `expired` (a pending request expires after 7 days, an approval unused for 24 hours).",
				"`limit` defaults to 50 and is at most 200.", ownerOnly},
			pool(append([]registry.Field{reqState}, pageFields...)...)...), nil, ListJoinRequests),
		registry.Def(m("joinRequests", "get", registry.Read, authz.JoinTokensRead, authz.Pool,
			"Returns one join request: why it was deferred, the machine's ids and CSR fingerprint, and its state.",
			[]string{ownerOnly}, registry.TenantID(), registry.ID("joinRequestId", ids.JoinRequest)),
			typed[JoinRequestRefInput](locateBy("join_requests", "join_request_id", "join request", joinReqID)), GetJoinRequest),
		registry.Def(m("joinRequests", "approve", registry.Mutation, authz.JoinRequestsApprove, authz.Pool,
			"Approves a pending join request: the machine's next join with the same CSR is admitted, once.",
			[]string{"A request that is not `pending` is `INVALID_STATE`, and so is one whose pool is not `active` (an archived pool admits no node; `details.state` says which).", ownerOnly},
			registry.TenantID(), registry.ID("joinRequestId", ids.JoinRequest)),
			typed[JoinRequestRefInput](locateBy("join_requests", "join_request_id", "join request", joinReqID)), ApproveJoinRequest),
		deny,
	}
}

// joinHolder names the join token presented to nodes.join for the audit
// record: the token (principal kind join-token, its id) and its pool, in
// the pool's tenant. An unknown token names nothing: the record is the
// platform's.
func joinHolder(ctx context.Context, q store.Q, in *JoinInput) (audit.Actor, authz.Resource) {
	var t struct {
		ID       string `db:"join_token_id"`
		PoolID   string `db:"pool_id"`
		TenantID string `db:"tenant_id"`
	}
	err := q.GetContext(ctx, &t, `SELECT join_token_id, pool_id, tenant_id FROM join_tokens WHERE secret_hash = $1`, auth.Hash(in.JoinToken))
	if err != nil {
		return audit.Actor{Kind: audit.KindJoinToken, Name: "unknown join token"}, authz.Resource{Type: authz.Pool}
	}
	return audit.Actor{PrincipalID: &t.ID, Kind: audit.KindJoinToken, Name: "join token of pool " + t.PoolID},
		authz.Resource{Type: authz.Pool, TenantID: t.TenantID, ID: t.PoolID}
}
