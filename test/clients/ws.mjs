// A real graphql-transport-ws client: connects with the token in
// connection_init, runs a query over the socket and prints the result as
// JSON. When the server closes the socket first, it prints the close code.
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const [url, token, query] = process.argv.slice(2);
let fail;
const closed = new Promise((_, reject) => (fail = reject));
const client = createClient({
  url,
  webSocketImpl: WebSocket,
  retryAttempts: 0,
  shouldRetry: () => false,
  lazy: true,
  connectionParams: token ? { Authorization: 'Bearer ' + token } : {},
  on: { closed: (e) => fail({ close: { code: e.code, reason: e.reason } }) },
});
const timer = setTimeout(() => fail({ error: 'timeout' }), 10000);
try {
  const result = await Promise.race([
    closed,
    new Promise((resolve, reject) => {
      let value;
      client.subscribe({ query }, { next: (v) => (value = v), error: reject, complete: () => resolve(value) });
    }),
  ]);
  console.log(JSON.stringify({ result }));
} catch (err) {
  console.log(JSON.stringify(err && err.close ? err : { error: String((err && err.message) || JSON.stringify(err)) }));
} finally {
  clearTimeout(timer);
  client.terminate();
  process.exit(0);
}
