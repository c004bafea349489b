// PostGraphile 5 serving one dealbase tenant schema: the peer of dealbase's GraphQL reads in
// `make bench`. Like `dealbase serve --workers 2`, it runs WORKERS processes (node:cluster) on
// one port, each with its own PostgreSQL pool. Configured by the environment:
//   DATABASE_URL  the database (postgresql://...)     SCHEMA   the tenant schema to expose
//   PORT, HOST    where to listen (127.0.0.1)           WORKERS  processes (2)
//   POOL_SIZE     PostgreSQL connections per process (10, dealbase's pool size)
// No authentication, rate limits or logging: the least a GraphQL read over this schema costs.
import cluster from "node:cluster";
import { createServer } from "node:http";

import { makePgService } from "postgraphile/adaptors/pg";
import { grafserv } from "postgraphile/grafserv/node";
import { postgraphile } from "postgraphile";
import { PostGraphileAmberPreset } from "postgraphile/presets/amber";

const workers = Number(process.env.WORKERS ?? "2");

function required(name) {
  const value = process.env[name];
  if (!value) {
    console.error(`${name} is not set`);
    process.exit(2);
  }
  return value;
}

if (cluster.isPrimary && workers > 1) {
  for (let index = 0; index < workers; index += 1) {
    cluster.fork();
  }
  cluster.on("exit", (worker, code, signal) => {
    console.error(`worker ${worker.process.pid} exited (${signal ?? code})`);
    process.exit(1);
  });
  for (const signal of ["SIGTERM", "SIGINT"]) {
    process.on(signal, () => {
      for (const worker of Object.values(cluster.workers ?? {})) worker?.kill("SIGTERM");
      process.exit(0);
    });
  }
} else {
  const preset = {
    extends: [PostGraphileAmberPreset],
    pgServices: [
      makePgService({
        connectionString: required("DATABASE_URL"),
        schemas: [required("SCHEMA")],
        poolConfig: { max: Number(process.env.POOL_SIZE ?? "10") },
      }),
    ],
    grafserv: { graphiql: false, watch: false },
    grafast: { explain: false },
  };
  const pgl = postgraphile(preset);
  const serv = pgl.createServ(grafserv);
  const server = createServer();
  serv.addTo(server).catch((error) => {
    console.error("PostGraphile failed to start", error);
    process.exit(1);
  });
  server.listen({ port: Number(required("PORT")), host: process.env.HOST ?? "127.0.0.1" });
  process.on("SIGTERM", () => {
    server.close();
    pgl.release();
    process.exit(0);
  });
}
