import { createServer, type Server } from 'node:http';
import { chmodSync, rmSync } from 'node:fs';
import type { Logger } from '../../lib/logger.js';

/**
 * What keepalived's liveness script asks (docs/multi-host.md, "When the data plane itself
 * fails"): an HTTP server on a Unix socket in the data plane's 0700 `vrrp/` folder, the socket
 * itself 0600, so only the data plane's user (and root) can ask, and nothing on the network can
 * reach it. `GET /alive` is answered by this process's main event loop, so an answer at all
 * proves the loop runs; it is 200 only while `serving()` says traffic is carried (with workers:
 * at least one of them answered its heartbeat lately), 503 otherwise. A stopped, looping or hung
 * process answers nothing and the script's own timeout fails the check.
 */
export interface AliveServerOptions {
  /** The socket's path (inside a folder only the data plane's user may enter). */
  path: string;
  /** Whether traffic is served now; called once per request, must be cheap and synchronous. */
  serving: () => boolean;
  logger: Logger;
}

/** keepalived asks once a second; anything more is not keepalived, and is cut. */
const MAX_CONNECTIONS = 8;
/** A request that does not arrive whole within this is not the script's (it sends one line). */
const REQUEST_TIMEOUT_MS = 2_000;

export class AliveServer {
  private server: Server | undefined;

  constructor(private readonly o: AliveServerOptions) {}

  /** Listens; a socket file an earlier run left is removed first (nobody listens on it). */
  async start(): Promise<void> {
    rmSync(this.o.path, { force: true });
    // Node checks these timeouts on a timer of its own, every 30 s unless told otherwise.
    const server = createServer({ requestTimeout: REQUEST_TIMEOUT_MS, headersTimeout: REQUEST_TIMEOUT_MS, connectionsCheckingInterval: 1_000 }, (req, res) => {
      res.setHeader('Connection', 'close');
      if (req.method !== 'GET' || req.url !== '/alive') {
        res.writeHead(404).end();
        return;
      }
      const ok = this.o.serving();
      res.writeHead(ok ? 200 : 503, { 'Content-Type': 'text/plain' }).end(ok ? 'serving\n' : 'no worker answers\n');
    });
    server.maxConnections = MAX_CONNECTIONS;
    server.keepAliveTimeout = 0;
    await new Promise<void>((resolve, reject) => {
      server.once('error', reject);
      server.listen(this.o.path, () => {
        server.off('error', reject);
        resolve();
      });
    });
    // The folder is 0700 already; the socket's own mode says the same to anyone who copies it.
    chmodSync(this.o.path, 0o600);
    server.on('error', (err) => this.o.logger.error({ err }, 'liveness socket error'));
    this.server = server;
  }

  async stop(): Promise<void> {
    const server = this.server;
    this.server = undefined;
    if (server === undefined) return;
    server.closeAllConnections();
    await new Promise<void>((resolve) => server.close(() => resolve()));
    rmSync(this.o.path, { force: true });
  }
}
