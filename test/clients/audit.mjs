// Runs the graphql-http audit suite against URL with a bearer token and
// prints one JSON line per audit; exits 1 when any audit errors.
import { auditServer } from 'graphql-http';

const [url, token] = process.argv.slice(2);
const fetchFn = (input, init = {}) => {
  const headers = new Headers(init.headers || {});
  headers.set('Authorization', 'Bearer ' + token);
  return fetch(input, { ...init, headers });
};
const results = await auditServer({ url, fetchFn });
let errors = 0, warnings = 0, oks = 0;
for (const r of results) {
  if (r.status === 'error') errors++;
  else if (r.status === 'warn') warnings++;
  else oks++;
  if (r.status !== 'ok') console.log(JSON.stringify({ id: r.id, status: r.status, name: r.name, reason: r.reason }));
}
console.log(JSON.stringify({ total: results.length, ok: oks, warn: warnings, error: errors }));
process.exit(errors > 0 ? 1 : 0);
