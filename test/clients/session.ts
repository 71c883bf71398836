// A client developer's session through a TypeScript client generated from
// the server's /openapi.json (openapi-typescript types, openapi-fetch
// calls). The Go test TestTypedClientSession generates .generated/api.d.ts,
// type-checks this file with tsc (strict) against them, compiles it and
// runs it against the real server: a schema that stopped describing an
// input or output breaks the type check, an answer that stopped fitting the
// schema breaks the run.
//
// It makes every method call the README's session makes, with the README's
// inputs (pools.create with "policy": {"sim": {"latencyMs": 1500}} among
// them), then the audit trail's read.
//
//   node .generated/session.js <base URL> <operator token> <machine.json>
//
// machine.json is {csr, systemUuid, serial, mac}: a CSR the test made
// (Node has no CSR builder), as the README's openssl line does.
import { readFileSync } from 'node:fs';
import createClient from 'openapi-fetch';
import type { components, paths } from './.generated/api.js';

type Project = components['schemas']['Project'];
type PoolPolicy = components['schemas']['PoolPolicy'];
type ErrorCode = components['schemas']['Error']['error']['code'];
// By the operation, not a schema name: what instances.get answers.
type InstanceState = paths['/api/compute/instances/get']['post']['responses'][200]['content']['application/json']['state'];

const [baseUrl, operator, machineFile] = process.argv.slice(2);
if (!baseUrl || !operator || !machineFile) {
  console.error('usage: node .generated/session.js <base URL> <operator token> <machine.json>');
  process.exit(2);
}
const machine = JSON.parse(readFileSync(machineFile, 'utf8')) as { csr: string; systemUuid: string; serial: string; mac: string };
const api = createClient<paths>({ baseUrl });
const bearer = (token: string) => ({ headers: { Authorization: `Bearer ${token}` } });

function fail(what: string, v: unknown): never {
  console.error(what, JSON.stringify(v));
  process.exit(1);
}

// --- the README's first block: tenant, tokens, project -----------------
const tenant = await api.POST('/api/compute/tenants/create', { body: { tenantId: 'acme', name: 'Acme' }, ...bearer(operator) });
if (!tenant.data) fail('tenants.create', tenant.error);
const created: string = tenant.data.createdAt;

const tok = await api.POST('/api/compute/tokens/create', {
  body: { tenantId: 'acme', name: 'ops', role: 'admin' }, ...bearer(operator),
});
if (!tok.data) fail('tokens.create', tok.error);
const role: 'viewer' | 'member' | 'admin' = tok.data.token.role;
const admin: string = tok.data.secret;

const dev = await api.POST('/api/compute/tokens/create', { body: { tenantId: 'acme', name: 'dev', role: 'member' }, ...bearer(admin) });
if (!dev.data) fail('tokens.create (member)', dev.error);
const member: string = dev.data.secret;

const made = await api.POST('/api/compute/projects/create', { body: { tenantId: 'acme', name: 'web' }, ...bearer(member) });
if (!made.data) fail('projects.create', made.error);
const project: Project = made.data;

const got = await api.POST('/api/compute/projects/get', { body: { tenantId: 'acme', projectId: project.projectId }, ...bearer(member) });
if (!got.data) fail('projects.get', got.error);

const listed = await api.POST('/api/compute/projects/list', { body: { tenantId: 'acme', limit: 10 }, ...bearer(admin) });
if (!listed.data) fail('projects.list', listed.error);
const names: string[] = listed.data.items.map((p: Project) => p.name);
const next: string | null = listed.data.cursor;

// Errors are typed too: the code is one of the error table's.
const missing = await api.POST('/api/compute/projects/get', {
  body: { tenantId: 'acme', projectId: 'prj_01jd0000000000000000000000' }, ...bearer(admin),
});
if (!missing.error) fail('projects.get of a missing project answered', missing.data);
const code: ErrorCode = missing.error.error.code;

const invalid = await api.POST('/api/compute/projects/create', { body: { tenantId: 'acme', name: ' padded ' }, ...bearer(admin) });
if (!invalid.error) fail('projects.create with a padded name answered', invalid.data);

// --- the README's second block: a bare-metal pool, a join, inventory ----
const pool = await api.POST('/api/compute/pools/create', {
  body: { tenantId: 'acme', name: 'fra1-h100', site: 'fra1', gpuModel: 'H100-SXM5-80GB', sharingMode: 'exclusive', kind: 'bare-metal' },
  ...bearer(admin),
});
if (!pool.data) fail('pools.create (bare-metal)', pool.error);

const jt = await api.POST('/api/compute/joinTokens/create', { body: { tenantId: 'acme', poolId: pool.data.poolId, maxUses: 5 }, ...bearer(admin) });
if (!jt.data) fail('joinTokens.create', jt.error);

// No bearer: the join token is the credential.
const join = await api.POST('/api/compute/nodes/join', {
  body: {
    joinToken: jt.data.secret, csr: machine.csr, attestor: 'token',
    hardware: { systemUuid: machine.systemUuid, serial: machine.serial, macs: [machine.mac] },
  },
});
if (!join.data) fail('nodes.join', join.error);
const nodeId = join.data.nodeId;
const credential = join.data.credential;
if (join.data.status !== 'admitted' || !nodeId || !credential) fail('nodes.join not admitted', join.data);

const first = await api.POST('/api/compute/inventory/report', {
  body: {
    nodeId,
    sections: {
      gpus: [{ uuid: 'GPU-5f3b2c1e-8a4d-4e6b-9c2f-1d7e3a9b0c41', index: 0, model: 'NVIDIA H100 80GB HBM3', memoryMiB: 81559 }],
      drivers: { nvidia: '570.86.15' },
    },
  },
  ...bearer(credential),
});
if (!first.data) fail('inventory.report', first.error);
const second = await api.POST('/api/compute/inventory/report', {
  body: { nodeId, sections: { gpus: [], drivers: { nvidia: '570.124.06' } } }, ...bearer(credential),
});
if (!second.data) fail('inventory.report (second)', second.error);

const diff = await api.POST('/api/compute/inventory/diff', { body: { tenantId: 'acme', nodeId }, ...bearer(admin) });
if (!diff.data) fail('inventory.diff', diff.error);
const changes: string[] = diff.data.changes.map((c) => c.type).sort();

// --- the README's third block: a VPS pool with a policy, an instance ---
const policy: PoolPolicy = { sim: { latencyMs: 1500 } };
const vps = await api.POST('/api/compute/pools/create', {
  body: { tenantId: 'acme', name: 'fra1-vps', site: 'fra1', gpuModel: 'H100', sharingMode: 'exclusive', kind: 'vps-provider', policy: { sim: { latencyMs: 1500 } } },
  ...bearer(admin),
});
if (!vps.data) fail('pools.create (vps-provider)', vps.error);
const storedPolicy: PoolPolicy = vps.data.policy;

const inst = await api.POST('/api/compute/instances/create', {
  body: {
    tenantId: 'acme', poolId: vps.data.poolId, projectId: project.projectId, name: 'web-1',
    size: { gpus: 1, vcpus: 8, memoryGiB: 64 }, clientToken: 'web-1-try-1',
  },
  ...bearer(member),
});
if (!inst.data) fail('instances.create', inst.error);
const I = { tenantId: 'acme', instanceId: inst.data.instanceId };

const states: InstanceState[] = [];
const get = await api.POST('/api/compute/instances/get', { body: I, ...bearer(member) });
if (!get.data) fail('instances.get', get.error);
states.push(get.data.state);
const desired: string[] = [];
for (const call of ['/api/compute/instances/stop', '/api/compute/instances/start', '/api/compute/instances/reboot', '/api/compute/instances/delete'] as const) {
  const r = await api.POST(call, { body: I, ...bearer(member) });
  if (!r.data) fail(call, r.error);
  desired.push(r.data.desiredState);
}
const events = await api.POST('/api/compute/instances/events', { body: I, ...bearer(member) });
if (!events.data) fail('instances.events', events.error);
const eventTypes: string[] = events.data.items.map((e) => e.type);
const lastEvent: string | undefined = events.data.items.at(-1)?.eventId;

// --- who did what: the admin reads the tenant's audit trail -------------
const trail = await api.POST('/api/compute/audit/list', { body: { tenantId: 'acme', method: 'instances.stop' }, ...bearer(admin) });
if (!trail.data) fail('audit.list', trail.error);
const stops = trail.data.items.map((a) => ({ principal: a.principal.principalId, kind: a.principal.kind, resource: a.resource.id, outcome: a.outcome }));
const refused = await api.POST('/api/compute/audit/list', { body: { tenantId: 'acme' }, ...bearer(member) });
if (!refused.error) fail('audit.list by a member answered', refused.data);

// What the types refuse: each line below must be a type error, or tsc
// fails on the unused directive (the generated types are not loose).
export function refusedByTheTypes(): void {
  // @ts-expect-error latencyMs is a number or an object of numbers
  const slow: PoolPolicy = { sim: { latencyMs: 'slow' } };
  // @ts-expect-error sharingMode is one of exclusive, mig, time-sliced
  void api.POST('/api/compute/pools/create', { body: { tenantId: 'acme', name: 'x', site: 's', gpuModel: 'g', sharingMode: 'shared', kind: 'bare-metal' } });
  // @ts-expect-error labels are strings
  void api.POST('/api/compute/nodes/update', { body: { tenantId: 'acme', nodeId: 'node_x', labels: { rack: 7 } } });
  // Keys the server does not read are the owner's, typed unknown.
  const own: PoolPolicy = { sim: { failureRate: 0.1 }, maxNodes: 40 };
  void slow; void own;
}

console.log(JSON.stringify({
  tenantCreatedAt: created, role, projectId: project.projectId, rowVersion: project.rowVersion, names, next,
  missing: { status: missing.response.status, code },
  invalid: { status: invalid.response.status, code: invalid.error.error.code, path: invalid.error.error.details.path },
  gotProject: got.data.projectId, stored: [first.data.stored, second.data.stored], changes,
  policy, storedPolicy, states, desired, eventTypes, lastEvent, stops,
  refused: { status: refused.response.status, code: refused.error.error.code },
}));
