// A real GraphQL over Server-Sent Events client (graphql-sse, distinct
// connections mode): runs one subscription with the token as a header and
// prints every result as one JSON line, then "COMPLETE" or an error line.
// It ends after the given number of results, or after 60 s.
//
//   node sse.mjs <stream URL> <token> <subscription> <results>
import { createClient } from 'graphql-sse';

const [url, token, query, want] = process.argv.slice(2);
const client = createClient({ url, singleConnection: false, retryAttempts: 0, headers: { Authorization: 'Bearer ' + token } });
const timer = setTimeout(() => { console.log(JSON.stringify({ error: 'timeout' })); process.exit(0); }, 60000);
let n = 0;
try {
  for await (const result of client.iterate({ query })) {
    console.log(JSON.stringify(result));
    if (++n >= Number(want)) break;
  }
  console.log('COMPLETE');
} catch (err) {
  console.log(JSON.stringify({ error: String((err && err.message) || JSON.stringify(err)) }));
} finally {
  clearTimeout(timer);
  client.dispose();
  process.exit(0);
}
