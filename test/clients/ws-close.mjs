// Provokes graphql-transport-ws close codes with the real graphql-ws
// client and prints the close code the server sent as JSON:
//   noinit    the client never sends connection_init (its connectionParams never resolve): 4408
//   badtoken  connection_init with an unknown token: 4403
//   dupid     two subscriptions under one id (generateID): 4409
import { createClient } from 'graphql-ws';
import WebSocket from 'ws';

const [url, mode, token, query] = process.argv.slice(2);
let done;
const closed = new Promise((resolve) => (done = resolve));
const client = createClient({
  url,
  webSocketImpl: WebSocket,
  retryAttempts: 0,
  shouldRetry: () => false,
  lazy: true,
  generateID: mode === 'dupid' ? () => 'same-id' : undefined,
  connectionParams:
    mode === 'noinit' ? () => new Promise(() => {}) : { Authorization: 'Bearer ' + (mode === 'badtoken' ? 'bct_unknown' : token) },
  on: { closed: (e) => done({ close: { code: e.code, reason: e.reason } }) },
});
const sink = { next: () => {}, error: () => {}, complete: () => {} };
client.subscribe({ query: query || '{ __typename }' }, sink);
if (mode === 'dupid') client.subscribe({ query: query || '{ __typename }' }, sink);
const timer = setTimeout(() => done({ error: 'timeout' }), 10000);
console.log(JSON.stringify(await closed));
clearTimeout(timer);
client.terminate();
process.exit(0);
