package errs

// DetailInfo is one field an error's details may hold: its key, its JSON
// Schema and when it is there. The OpenAPI document's Error.details and
// docs/api/errors.md are rendered from Details, and a test holds every
// detail the code sets (With, and the GraphQL layer's own) to it.
type DetailInfo struct {
	Key    string
	Schema map[string]any
	When   string
}

// ReasonInfo is one value of details.reason: the code it comes with and
// which rule refused.
type ReasonInfo struct {
	Value string
	Code  Code
	When  string
}

func str() map[string]any  { return map[string]any{"type": "string"} }
func intg() map[string]any { return map[string]any{"type": "integer"} }
func ref(name string) map[string]any {
	return map[string]any{"$ref": "#/components/schemas/" + name}
}

// Details lists every field of details, in the order the docs show them.
func Details() []DetailInfo {
	return []DetailInfo{
		{"path", str(), "the input field the refusal is about, as `a.b[2].c` (`INVALID_INPUT`: the first offending field; also `INVALID_STATE` and `CONFLICT` where a field's value is the cause)"},
		{"reason", str(), "which rule refused, where one code covers several (the values below)"},
		{"requestId", str(), "`INTERNAL`: the request's id, as in the `X-Request-Id` header and the server's logs"},
		{"retryAfterSeconds", map[string]any{"type": "integer", "minimum": 1}, "`RATE_LIMITED`: wait this long before retrying (also the `Retry-After` header)"},
		{"charge", intg(), "`RATE_LIMITED` of a GraphQL operation: the requests its cost spends"},
		{"limit", intg(), "the bound that was reached (`reason` says which)"},
		{"rowVersion", intg(), "`CONFLICT` on `expectedVersion`: the resource's current version"},
		{"state", str(), "`INVALID_STATE`: the resource's state that forbids the change"},
		{"desiredState", str(), "`INVALID_STATE` of an instance: its `desiredState`"},
		{"issues", map[string]any{"type": "array", "items": ref("Issue")}, "`INVALID_INPUT` of a provisioning profile: the problems found, as `profiles.validate` reports them, the first 20 of them in `profiles.render` and `workflows.create` (`details.issueCount` says how many; `profiles.validate` answers every one)"},
		{"issueCount", map[string]any{"type": "integer", "minimum": 1}, "`INVALID_INPUT` of a provisioning profile in `profiles.render` and `workflows.create`: how many problems were found"},
		{"quota", ref("Quota"), "`INVALID_STATE` with `reason: \"quota\"`: the offer's quota that would be exceeded"},
		{"used", ref("Quota"), "`INVALID_STATE` with `reason: \"quota\"` (`instances.create`): the tenant's live instances and their GPUs in the pool"},
		{"requested", intg(), "`INVALID_STATE` with `reason: \"quota\"` (`instances.create`): the GPUs the instance asks for"},
		{"peakReservedGpus", intg(), "`INVALID_STATE` with `reason: \"quota\"` (`reservations.create`): the GPUs the tenant would hold reserved at once"},
		{"total", ref("Size"), "`INVALID_STATE` with `reason: \"capacity\"` (`reservations.create`): the pool's whole capacity"},
		{"nodeId", str(), "`CONFLICT` of `nodes.join`: the node the machine already joined as"},
		{"joinRequestId", str(), "`PERMISSION_DENIED` of `nodes.join`: the join request that was denied, or approved for other hardware"},
		{"instanceId", str(), "`CONFLICT` on `clientToken`: the instance created with that token"},
		{"step", intg(), "`INVALID_STATE` of `workflows.reportStep`: the step whose status refuses the report"},
		{"stepStatus", str(), "`INVALID_STATE` of `workflows.reportStep`: that step's status"},
		{"lastEventId", str(), "`UNAVAILABLE` with `reason: \"slow-consumer\"`: the last event delivered; subscribe again after it"},
		{"cost", intg(), "GraphQL, `reason: \"complexity\"`: the operation's complexity (docs/graphql.md says how it is counted)"},
		{"fields", intg(), "GraphQL, `reason: \"fields\"`: the fields the document selects with its fragments expanded"},
		{"depth", intg(), "GraphQL, `reason: \"depth\"`: how deep the operation, or its introspection, nests"},
		{"count", intg(), "GraphQL, `reason: \"introspection\"`, `\"connections\"` or `\"batch\"`: the `__schema`/`__type` fields, connection fields or mutations the operation holds"},
		{"name", str(), "GraphQL, `reason: \"fields\"`: the response name answered too many times"},
		{"field", str(), "GraphQL, `reason: \"introspection\"`: the introspection field answered under two names"},
	}
}

// Reasons lists every value of details.reason, by code.
func Reasons() []ReasonInfo {
	return []ReasonInfo{
		{"body-deadline", InvalidInput, "the body did not arrive before the request's deadline"},
		{"persisted-queries-not-supported", InvalidInput, "a GraphQL request sent a persisted query's hash without its document"},
		{"parse", InvalidInput, "a GraphQL document that does not parse"},
		{"validation", InvalidInput, "a GraphQL document the schema's rules refuse"},
		{"tokens", InvalidInput, "a GraphQL document of more tokens than the limit (`details.limit`)"},
		{"fields", InvalidInput, "a GraphQL operation that selects more fields than the limit, or answers one response name too many times (`details.limit`)"},
		{"depth", InvalidInput, "a GraphQL operation, or its introspection, nested deeper than the limit (`details.depth`, `details.limit`)"},
		{"introspection", InvalidInput, "a GraphQL operation with too many `__schema`/`__type` fields, or an introspection field under two names"},
		{"complexity", InvalidInput, "a GraphQL operation, or a subscription's selection, costs more than the limit (`details.cost`, `details.limit`)"},
		{"connections", InvalidInput, "a GraphQL operation with more connection fields than the limit (`details.count`, `details.limit`)"},
		{"batch", InvalidInput, "a GraphQL document with more mutations than the credential's burst (`details.count`, `details.limit`)"},
		{"read-budget", InvalidInput, "the query, mutation or method call reads or answers more than its budget of profile documents, workflows, pool policies and inventory (`details.limit`, bytes): ask for smaller pages, fewer of them, or fewer aliases of one"},
		{"challenge-unknown", Unauthenticated, "`nodes.join` (tpm): no open challenge has that id"},
		{"challenge-used", Unauthenticated, "`nodes.join` (tpm): the challenge was already answered"},
		{"challenge-expired", Unauthenticated, "`nodes.join` (tpm): the challenge expired"},
		{"challenge-mismatch", Unauthenticated, "`nodes.join` (tpm): the challenge was made for another join token, CSR, hardware or key"},
		{"wrong-secret", Unauthenticated, "`nodes.join` (tpm): the activated secret does not answer the challenge"},
		{"origin", PermissionDenied, "a WebSocket upgrade whose `Origin` is neither the server's own host nor one of `COMPUTE_ALLOWED_ORIGINS`"},
		{"expired-cursor", InvalidState, "the cursor is older than the event retention"},
		{"last-admin", InvalidState, "`members.grant`, `members.revoke`: the change would leave the tenant without an admin"},
		{"quota", InvalidState, "the pool's offer to the tenant allows no more (`details.quota`)"},
		{"capacity", InvalidState, "`reservations.create`: the pool has no room in the window (`details.total`)"},
		{"bare-metal", InvalidState, "instances live in VPS pools, not bare-metal ones"},
		{"archived", InvalidState, "the pool is archived (`nodes.join`, `joinTokens.create`, `pools.update`, `pools.offer`, `instances.create`, `reservations.create`, a failed instance's `instances.start`, ...)"},
		{"not-offered", InvalidState, "`instances.start` of a failed instance, whose pool is no longer offered to its tenant: it starts again only where its tenant may create instances"},
		{"canceled", InvalidState, "the reservation is canceled"},
		{"expired", InvalidState, "the reservation has ended"},
		{"deleted", InvalidState, "the instance is deleted"},
		{"not-running", InvalidState, "`instances.reboot`: its desired state is not `running`, or it failed"},
		{"not-a-move", InvalidState, "a host's report of a state the instance cannot move to from its own"},
		{"operations", RateLimited, "a WebSocket's subscribe past the operations it may run at once (`details.limit`); the socket stays: complete one first"},
		{"sessions", RateLimited, "the credential holds its sockets and streams on this replica"},
		{"open-challenges", RateLimited, "`nodes.join` (tpm): the join token holds its open challenges (`details.limit`)"},
		{"pending-requests", RateLimited, "`nodes.join`: the join token holds its pending join requests (`details.limit`); a join it would defer waits until one is decided or expires"},
		{"deadline", Unavailable, "the request ran past its deadline"},
		{"busy", Unavailable, "the GraphQL operation did not start before its deadline"},
		{"cancelled", Unavailable, "the client went away before the answer"},
		{"shutdown", Unavailable, "the replica is shutting down; its streams end"},
		{"slow-consumer", Unavailable, "a subscriber did not keep up with its events (`details.lastEventId`)"},
	}
}
