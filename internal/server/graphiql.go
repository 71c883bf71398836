package server

import (
	"embed"
	"io/fs"
	"net/http"
	"strings"

	"github.com/bettercompute/computed/internal/errs"
)

// GraphiQL and React are vendored from their npm packages (graphiql 3.8.3,
// react 18.3.1) so the page works on a machine without internet access.
//
//go:embed graphiql
var graphiqlFS embed.FS

var assets = func() fs.FS {
	sub, _ := fs.Sub(graphiqlFS, "graphiql")
	return sub
}()

// graphiqlAssets serves the vendored files by name: a directory (its
// listing) or a name that is no file is NOT_FOUND in the contract's error
// shape, as any other path no route serves (http.FileServer listed the
// directory and answered a plain-text 404).
func (s *Server) graphiqlAssets(w http.ResponseWriter, r *http.Request) {
	name := strings.TrimPrefix(r.URL.Path, "/graphiql/")
	if st, err := fs.Stat(assets, name); name == "" || !fs.ValidPath(name) || err != nil || st.IsDir() {
		s.rest.WriteError(w, r, errs.E(errs.NotFound, "nothing is served at %s", r.URL.Path))
		return
	}
	w.Header().Set("Cache-Control", "public, max-age=86400")
	http.ServeFileFS(w, r, assets, name)
}

// graphiqlPage is GraphiQL behind a token bar. Without a token it shows
// which token to paste instead of GraphiQL, and sends nothing (no query,
// no introspection): GraphiQL asks for the schema as it mounts, and without
// a token the answer is an UNAUTHENTICATED error in its results pane.
const graphiqlPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Better Compute GraphiQL</title>
<link rel="icon" href="data:,">
<link rel="stylesheet" href="/graphiql/graphiql.min.css">
<style>body{margin:0;height:100vh;display:flex;flex-direction:column}#bar{margin:0;font:13px sans-serif;padding:6px;background:#f3f3f3;display:flex;gap:6px;align-items:center}#graphiql{flex:1}#bar input{flex:1;font-family:monospace}
#help{font:15px/1.5 sans-serif;max-width:46em;margin:3em auto;padding:0 1em;color:#222}#help code{background:#f3f3f3;padding:1px 4px;border-radius:3px}#help h1{font-size:20px}#refused{font:15px/1.5 sans-serif;max-width:46em;margin:1em auto 0;padding:.5em 1em;color:#8a1f11;background:#fdecea}</style>
</head>
<body>
<form id="bar"><label for="token">Bearer token</label><input id="token" type="password" autocomplete="off" placeholder="paste a token; it stays in this browser's localStorage"><button id="save" type="submit">Use</button><button id="forget" type="button">Forget</button></form>
<div id="graphiql" hidden>Loading…</div>
<p id="refused" hidden></p>
<div id="help" hidden>
<h1>Paste a bearer token above to start</h1>
<p>Every request needs one; this page sends none until you paste it (GraphiQL, its schema and docs load then).</p>
<ul>
<li><b>The operator's token</b> (every tenant): the file <code>$COMPUTE_DATA_DIR/operator-token</code> on the server's machine, <code>.data/operator-token</code> under the checkout by default (<code>cat .data/operator-token</code>); it is written on the embedded database's first start. With <code>COMPUTE_BOOTSTRAP_TOKEN</code> set, it is that value.</li>
<li><b>A tenant's token</b>: the <code>secret</code> that <code>tokens.create</code> answers once (<code>POST /api/compute/tokens/create</code> with <code>tenantId</code>, <code>name</code> and <code>role</code>: viewer, member or admin), called with the operator's token or a tenant admin's.</li>
</ul>
<p>The token stays in this browser's localStorage until you press Forget.</p>
</div>
<script src="/graphiql/react.production.min.js"></script>
<script src="/graphiql/react-dom.production.min.js"></script>
<script src="/graphiql/graphiql.min.js"></script>
<script>
const input = document.getElementById('token');
const token = localStorage.getItem('compute-token') || '';
input.value = token;
function render() {
  const auth = {Authorization: 'Bearer ' + token};
  const wsURL = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/graphql';
  const fetcher = GraphiQL.createFetcher({url: '/graphql', subscriptionUrl: wsURL, headers: auth, wsConnectionParams: auth});
  document.getElementById('graphiql').hidden = false;
  ReactDOM.createRoot(document.getElementById('graphiql')).render(React.createElement(GraphiQL, {fetcher, defaultEditorToolsVisibility: true}));
}
document.getElementById('bar').onsubmit = (e) => { e.preventDefault(); localStorage.setItem('compute-token', input.value.trim()); location.reload(); };
document.getElementById('forget').onclick = () => { localStorage.removeItem('compute-token'); location.reload(); };
if (token) {
  // The token is tried once before GraphiQL mounts: refused, GraphiQL
  // would show "Error fetching schema" in its Docs pane and retry a
  // subscription's socket for 40 s (graphql-ws retries a 4403), each try
  // spending the address's failed-authentication budget.
  const refuse = (why) => {
    const refused = document.getElementById('refused');
    refused.textContent = why;
    refused.hidden = false;
    document.getElementById('help').hidden = false;
    input.focus();
  };
  if (!/^[\x21-\x7e]+$/.test(token)) {
    // A character no bearer token has: outside Latin-1 (a zero-width
    // space from a copy) fetch threw, a control character was a plain 400
    // from net/http, and GraphiQL mounted to show either.
    refuse('This token holds a character no bearer token has (a space, a control character, or one outside Latin-1 such as a zero-width space picked up in a copy). Paste it again.');
  } else {
    fetch('/graphql', {method: 'POST', headers: {Authorization: 'Bearer ' + token, 'Content-Type': 'application/json'}, body: '{"query":"{ viewer { kind } }"}'})
      .then((r) => {
        if (r.status === 401) {
          refuse('The server refused this token: it is unknown, revoked, or not a bearer token. Paste another.');
        } else if (r.status === 429) {
          refuse('Too many requests from this address or token (after refused tokens, the address waits): retry in ' + (r.headers.get('Retry-After') || 'a few') + ' s by reloading the page.');
        } else {
          render();
        }
      }, render);
  }
} else {
  document.getElementById('help').hidden = false;
  input.focus();
}
</script>
</body>
</html>`

func graphiql(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self' ws: wss:")
	_, _ = w.Write([]byte(graphiqlPage))
}
