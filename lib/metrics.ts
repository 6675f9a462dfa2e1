import { createServer, type Server } from 'node:http';
import { collectDefaultMetrics, Registry } from 'prom-client';

/**
 * A fresh registry per process (never prom-client's global one), so that tests can run several
 * components in one process without metric name clashes.
 */
export function createRegistry(process: string): Registry {
  const registry = new Registry();
  registry.setDefaultLabels({ process });
  collectDefaultMetrics({ register: registry, prefix: 'fulcrum_' });
  return registry;
}

/** Serves GET /metrics for a process that has no HTTP server of its own. */
export async function serveMetrics(registry: Pick<Registry, 'metrics' | 'contentType'>, host: string, port: number): Promise<Server> {
  const server = createServer((req, res) => {
    if (req.url !== '/metrics') {
      res.writeHead(404, { 'content-type': 'text/plain' }).end('not found\n');
      return;
    }
    registry.metrics().then(
      (body) => res.writeHead(200, { 'content-type': registry.contentType }).end(body),
      (err: Error) => res.writeHead(500, { 'content-type': 'text/plain' }).end(String(err.message)),
    );
  });
  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(port, host, () => resolve());
  });
  return server;
}
