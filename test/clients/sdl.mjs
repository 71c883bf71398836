// Checks the committed schema.graphql against the running server: both are
// built with graphql-js (the SDL with buildSchema, the server's answer to the
// standard introspection query with buildClientSchema) and printed; the
// prints must be equal. Prints {"equal": bool, "diff": first differing line}.
//
//   node sdl.mjs <graphql URL> <token> <schema.graphql>
import { readFileSync } from 'node:fs';
import { buildClientSchema, buildSchema, getIntrospectionQuery, lexicographicSortSchema, printSchema } from 'graphql';

const [url, token, file] = process.argv.slice(2);
const res = await fetch(url, {
  method: 'POST',
  headers: { 'Content-Type': 'application/json', Accept: 'application/graphql-response+json', Authorization: 'Bearer ' + token },
  body: JSON.stringify({ query: getIntrospectionQuery({ descriptions: true, inputValueDeprecation: true }) }),
});
const body = await res.json();
if (!body.data) {
  console.log(JSON.stringify({ equal: false, diff: 'introspection failed: ' + JSON.stringify(body).slice(0, 500) }));
  process.exit(0);
}
const print = (s) => printSchema(lexicographicSortSchema(s)).split('\n');
const served = print(buildClientSchema(body.data));
const committed = print(buildSchema(readFileSync(file, 'utf8')));
let diff = '';
for (let i = 0; i < Math.max(served.length, committed.length); i++) {
  if (served[i] !== committed[i]) { diff = `line ${i + 1}: served ${JSON.stringify(served[i])}, committed ${JSON.stringify(committed[i])}`; break; }
}
console.log(JSON.stringify({ equal: diff === '', lines: served.length, diff }));
