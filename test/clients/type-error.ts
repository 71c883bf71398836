// tsc must refuse this file: TestTypedClientSession checks that it does,
// so the type check of session.ts is known to fail on a type error. The
// README's pools.create with its sim's failure rate as a string.
import createClient from 'openapi-fetch';
import type { paths } from './.generated/api.js';

const api = createClient<paths>({ baseUrl: 'http://127.0.0.1:8080' });
void api.POST('/api/compute/pools/create', {
  body: { tenantId: 'acme', name: 'fra1-vps', site: 'fra1', gpuModel: 'H100', sharingMode: 'exclusive', kind: 'vps-provider', policy: { sim: { latencyMs: 1500, failureRate: 'high' } } },
});
