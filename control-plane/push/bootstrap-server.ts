import { createServer, type Server } from 'node:https';
import type { IncomingMessage, ServerResponse } from 'node:http';
import type { TLSSocket } from 'node:tls';
import type { Logger } from '../../lib/logger.js';
import type { Clock } from '../../lib/clock.js';
import type { CapRefusal } from '../../lib/conn-cap.js';
import { clientKey } from '../../lib/client-key.js';
import { defaultBootstrapListenerLimits, limitListener, listenerServerOptions, type ListenerLimits } from '../../lib/listener-limits.js';
import { WindowTable } from '../api/rate-limit.js';
import { PeerRefused, RenewalLimited, type FleetService } from '../domain/fleet/fleet-service.js';

const BODY_MAX = 64 * 1024;

/**
 * Requests per minute from one client address (an IPv6 client by its /64). A join is two requests
 * and a renewal one, each host's once in days: 120 lets 60 hosts behind one address join in the
 * same minute, and cuts off a client guessing join tokens or making the CA sign in a loop.
 */
export const defaultBootstrapRateLimit = 120;
const RATE_WINDOW_MS = 60_000;
/** Most client addresses the rate table remembers (the least recently seen go first). */
const RATE_KEYS = 10_000;

/**
 * The bootstrap endpoint (docs/security/grpc.md, "Joining a host"): HTTPS with the control
 * plane's fleet certificate, on its own listener because the gRPC listener refuses every TLS
 * handshake without a client certificate, and a joining host has none yet.
 *
 * - `GET /v1/ca`: the CA certificate; the joining host accepts it only if its hash is the pin in
 *   its join token, then talks to the next two with TLS verified against it.
 * - `POST /v1/join` `{token, role, csr}`: redeems a one-time token for a certificate.
 * - `POST /v1/renew` `{csr}` with the current client certificate: a new certificate for the
 *   same identity (refused once revoked or expired, or its host removed; 429 past
 *   CERTS_PER_HOST_PER_HOUR).
 *
 * Anyone who reaches the port can call it, so it has the API's listener limits (request and idle
 * timeouts, connection caps at accept) and a per-address rate limit, checked before the body is
 * read: 429 with `Retry-After` (docs/security/api.md, "Slow and idle clients").
 */
export async function startBootstrapServer(o: {
  fleet: FleetService;
  serverPair: { keyPem: string; certPem: string };
  host: string;
  port: number;
  logger: Logger;
  clock: Clock;
  limits?: ListenerLimits;
  /** Requests per minute per client address; 0 = no limit. */
  rateLimit?: number;
  /** Told of every connection a cap closed at accept, and of every request the rate limit refused. */
  refused?: (what: CapRefusal | 'rate') => void;
}): Promise<{ server: Server; port: number }> {
  const log = o.logger.child({ component: 'bootstrap' });
  const limits = o.limits ?? defaultBootstrapListenerLimits;
  const rateLimit = o.rateLimit ?? defaultBootstrapRateLimit;
  const rates = rateLimit > 0 ? new WindowTable(rateLimit, RATE_WINDOW_MS, RATE_KEYS) : undefined;
  const server = createServer({
    ...listenerServerOptions(limits),
    key: o.serverPair.keyPem, cert: o.serverPair.certPem, ca: o.fleet.caPem,
    // A certificate is asked for (renewal proves who renews with it) but not required: joining hosts have none.
    requestCert: true, rejectUnauthorized: false,
  }, (req, res) => void handle(req, res));
  limitListener(server, limits, o.refused);
  // A request past the request timeout, or one the parser refuses: closed at once. The callers
  // are Fulcrum's own hosts, which need no explanation, and a client that stopped sending would
  // otherwise keep its half of the connection open.
  server.on('clientError', (_err, socket) => socket.destroy());

  const send = (res: ServerResponse, status: number, body: unknown) => {
    res.writeHead(status, { 'content-type': 'application/json' });
    res.end(JSON.stringify(body));
  };

  async function handle(req: IncomingMessage, res: ServerResponse): Promise<void> {
    try {
      const rate = rates?.take(clientKey(req.socket.remoteAddress ?? '', limits.clientIpv6Prefix), o.clock.now());
      if (rate && !rate.allowed) {
        o.refused?.('rate');
        res.writeHead(429, { 'content-type': 'application/json', 'retry-after': String(Math.max(1, Math.ceil((rate.resetAt - o.clock.now()) / 1000))), connection: 'close' });
        return void res.end(JSON.stringify({ error: 'too many requests' }));
      }
      if (req.method === 'GET' && req.url === '/v1/ca') return send(res, 200, { caPem: o.fleet.caPem });
      if (req.method !== 'POST' || (req.url !== '/v1/join' && req.url !== '/v1/renew')) return send(res, 404, { error: 'not found' });
      const body = await readJson(req);
      if (req.url === '/v1/join') {
        const issued = await o.fleet.join(String(body.token ?? ''), body.role, body.csr);
        log.info({ serial: issued.serial }, 'host joined');
        return send(res, 200, { certPem: issued.certPem });
      }
      const socket = req.socket as TLSSocket;
      const raw = socket.authorized ? socket.getPeerCertificate().raw : undefined;
      const issued = await o.fleet.renew(raw, body.csr);
      log.info({ serial: issued.serial }, 'certificate renewed');
      return send(res, 200, { certPem: issued.certPem });
    } catch (err) {
      if (err instanceof PeerRefused || err instanceof BadRequest) {
        log.warn({ reason: err.message, url: req.url }, 'bootstrap request refused');
        return send(res, err instanceof BadRequest ? 400 : err instanceof RenewalLimited ? 429 : 403, { error: err.message });
      }
      log.error({ err }, 'bootstrap request failed');
      return send(res, 500, { error: 'internal error' });
    }
  }

  await new Promise<void>((resolve, reject) => {
    server.once('error', reject);
    server.listen(o.port, o.host, () => resolve());
  });
  const addr = server.address();
  return { server, port: typeof addr === 'object' && addr ? addr.port : 0 };
}

class BadRequest extends Error {}

function readJson(req: IncomingMessage): Promise<Record<string, unknown>> {
  return new Promise((resolve, reject) => {
    let size = 0;
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => {
      size += c.length;
      if (size > BODY_MAX) {
        reject(new BadRequest('body too large'));
        req.destroy();
        return;
      }
      chunks.push(c);
    });
    req.on('end', () => {
      try {
        const v = JSON.parse(Buffer.concat(chunks).toString('utf8')) as unknown;
        if (typeof v !== 'object' || v === null || Array.isArray(v)) throw new Error();
        resolve(v as Record<string, unknown>);
      } catch {
        reject(new BadRequest('body must be a JSON object'));
      }
    });
    req.on('error', reject);
  });
}
