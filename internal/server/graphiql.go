package server

import (
	"embed"
	"io/fs"
	"net/http"
)

// GraphiQL and React are vendored from their npm packages (graphiql 3.8.3,
// react 18.3.1) so the page works on a machine without internet access.
//
//go:embed graphiql
var graphiqlFS embed.FS

var assets = func() http.Handler {
	sub, _ := fs.Sub(graphiqlFS, "graphiql")
	return http.StripPrefix("/graphiql/", http.FileServer(http.FS(sub)))
}()

func graphiqlAssets(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "public, max-age=86400")
	assets.ServeHTTP(w, r)
}

const graphiqlPage = `<!doctype html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>Better Compute GraphiQL</title>
<link rel="stylesheet" href="/graphiql/graphiql.min.css">
<style>body{margin:0;height:100vh;display:flex;flex-direction:column}#bar{font:13px sans-serif;padding:6px;background:#f3f3f3;display:flex;gap:6px;align-items:center}#graphiql{flex:1}#bar input{flex:1;font-family:monospace}</style>
</head>
<body>
<div id="bar"><label for="token">Bearer token</label><input id="token" type="password" placeholder="paste a token; it stays in this browser's localStorage"><button id="save">Use</button></div>
<div id="graphiql">Loading…</div>
<script src="/graphiql/react.production.min.js"></script>
<script src="/graphiql/react-dom.production.min.js"></script>
<script src="/graphiql/graphiql.min.js"></script>
<script>
const input = document.getElementById('token');
input.value = localStorage.getItem('compute-token') || '';
function render() {
  const token = localStorage.getItem('compute-token') || '';
  const auth = token ? {Authorization: 'Bearer ' + token} : {};
  const wsURL = (location.protocol === 'https:' ? 'wss://' : 'ws://') + location.host + '/graphql';
  const fetcher = GraphiQL.createFetcher({url: '/graphql', subscriptionUrl: wsURL, headers: auth, wsConnectionParams: auth});
  ReactDOM.createRoot(document.getElementById('graphiql')).render(React.createElement(GraphiQL, {fetcher, defaultEditorToolsVisibility: true}));
}
document.getElementById('save').onclick = () => { localStorage.setItem('compute-token', input.value.trim()); location.reload(); };
render();
</script>
</body>
</html>`

func graphiql(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.Header().Set("Content-Security-Policy", "default-src 'self'; script-src 'self' 'unsafe-inline'; style-src 'self' 'unsafe-inline'; img-src 'self' data:; font-src 'self' data:; connect-src 'self' ws: wss:")
	_, _ = w.Write([]byte(graphiqlPage))
}
