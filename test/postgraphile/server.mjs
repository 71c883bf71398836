// PostGraphile v5 (Amber preset, no authorization of any kind) over the
// product's database, for the load benchmark's side-by-side comparison
// (cmd/loadtest starts it). Environment: DATABASE_URL, PORT, PG_POOL_MAX,
// PGL_WORKERS.
//
// PostGraphile is deployed as a cluster of as many Node.js processes as
// there are cores (one process runs JavaScript on one core): PGL_WORKERS
// defaults to os.availableParallelism(), so it gets the same cores as the
// server it is compared with. The workers share the port (node:cluster)
// and PG_POOL_MAX connections between them, as many as the server's pool.
import cluster from "node:cluster";
import { createServer } from "node:http";
import os from "node:os";

const workers = Math.max(1, Number(process.env.PGL_WORKERS || os.availableParallelism()));
const poolMax = Number(process.env.PG_POOL_MAX || 20);
if (cluster.isPrimary && workers > 1) {
  let listening = 0;
  for (let i = 0; i < workers; i++) {
    cluster.fork().on("listening", () => {
      if (++listening === workers) console.log(`postgraphile listening with ${workers} workers`);
    });
  }
  cluster.on("exit", (w, code) => { if (code) { console.error(`worker ${w.process.pid} exited ${code}`); process.exit(1); } });
  for (const sig of ["SIGINT", "SIGTERM"]) {
    process.on(sig, () => { for (const w of Object.values(cluster.workers)) w.kill(sig); process.exit(0); });
  }
} else {
  await serve();
}

async function serve() {
  // Node 20 lacks Promise.withResolvers (Node 22 has it); grafast uses it.
  if (typeof Promise.withResolvers !== "function") {
    Promise.withResolvers = function withResolvers() {
      let resolve, reject;
      const promise = new this((res, rej) => { resolve = res; reject = rej; });
      return { promise, resolve, reject };
    };
  }

  const { postgraphile } = await import("postgraphile");
  const { PostGraphileAmberPreset } = await import("postgraphile/presets/amber");
  const { makePgService } = await import("postgraphile/adaptors/pg");
  const { grafserv } = await import("postgraphile/grafserv/node");
  const { jsonPgSmartTags } = await import("postgraphile/utils");

  // The table nodes would be the GraphQL type Node, which the Relay preset
  // reserves for its interface: name it ComputeNode, as the server does.
  const names = jsonPgSmartTags({ version: 1, config: { class: { nodes: { tags: { name: "compute_nodes" } } } } });

  const port = Number(process.env.PORT || 5678);
  const preset = {
    extends: [PostGraphileAmberPreset],
    plugins: [names],
    pgServices: [makePgService({
      connectionString: process.env.DATABASE_URL,
      schemas: ["public"],
      // As many connections as the server's pool, shared by the workers,
      // kept open while idle as the server keeps its own (node-postgres
      // closes them after 10 s).
      poolConfig: { max: Math.max(1, Math.ceil(poolMax / workers)), idleTimeoutMillis: 0 },
    })],
    grafserv: { port, host: "127.0.0.1", graphqlPath: "/graphql", watch: false, graphiql: false },
    grafast: { explain: false },
    gather: { installWatchFixtures: false },
  };

  const pgl = postgraphile(preset);
  const serv = pgl.createServ(grafserv);
  // Keep connections open as long as the load generator does (Node closes
  // idle keep-alive connections after 5 s and resets some mid-run).
  const server = createServer({ keepAliveTimeout: 120_000, headersTimeout: 125_000, requestTimeout: 0 });
  server.once("listening", () => { console.log(`postgraphile listening on 127.0.0.1:${port}`); });
  await serv.addTo(server);
  server.listen(port, "127.0.0.1");
  for (const sig of ["SIGINT", "SIGTERM"]) {
    process.on(sig, async () => { server.close(); await pgl.release(); process.exit(0); });
  }
}
