// A client developer's session through a TypeScript client generated from
// the server's /openapi.json (openapi-typescript types, openapi-fetch
// calls). The Go test TestTypedClientSession generates .generated/api.d.ts,
// type-checks this file with tsc (strict), compiles it and runs it against
// the real server: a schema that stopped describing an output breaks the
// type check, an answer that stopped fitting the schema breaks the run.
//
//   node .generated/session.js <base URL> <operator token>
import createClient from 'openapi-fetch';
import type { components, paths } from './.generated/api.js';

type Project = components['schemas']['Project'];
type ErrorCode = components['schemas']['Error']['error']['code'];

const [baseUrl, operator] = process.argv.slice(2);
if (!baseUrl || !operator) {
  console.error('usage: node .generated/session.js <base URL> <operator token>');
  process.exit(2);
}
const api = createClient<paths>({ baseUrl });
const bearer = (token: string) => ({ headers: { Authorization: `Bearer ${token}` } });

function fail(what: string, v: unknown): never {
  console.error(what, JSON.stringify(v));
  process.exit(1);
}

// The operator creates a tenant and an admin token for it.
const tenant = await api.POST('/api/compute/tenants/create', { body: { tenantId: 'acme', name: 'Acme' }, ...bearer(operator) });
if (!tenant.data) fail('tenants.create', tenant.error);
const created: string = tenant.data.createdAt;

const tok = await api.POST('/api/compute/tokens/create', {
  body: { tenantId: 'acme', name: 'ci', role: 'admin' }, ...bearer(operator),
});
if (!tok.data) fail('tokens.create', tok.error);
const role: 'viewer' | 'member' | 'admin' = tok.data.token.role;
const admin: string = tok.data.secret;

// The admin creates a project and lists the tenant's projects.
const made = await api.POST('/api/compute/projects/create', { body: { tenantId: 'acme', name: 'web' }, ...bearer(admin) });
if (!made.data) fail('projects.create', made.error);
const project: Project = made.data;

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

console.log(JSON.stringify({
  tenantCreatedAt: created, role, projectId: project.projectId, rowVersion: project.rowVersion, names, next,
  missing: { status: missing.response.status, code },
  invalid: { status: invalid.response.status, code: invalid.error.error.code, path: invalid.error.error.details.path },
}));
