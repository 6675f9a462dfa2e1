import { existsSync, readFileSync, realpathSync, statSync } from 'node:fs';
import { extname, join, resolve, sep } from 'node:path';
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';

/**
 * The web console (docs/console.md): the built single-page app under `/console` on the API's own
 * address, so the browser calls `/v4` same-origin. Only files inside the build folder are ever
 * read; any other path under `/console` answers the app's index page, whose script routes on the
 * client. The page may load scripts and styles only from this origin (no inline script), and
 * may talk only to this origin.
 */
export const consoleCsp = [
  "default-src 'none'", "script-src 'self'", "style-src 'self'", "img-src 'self' data: blob:", "font-src 'self'",
  "connect-src 'self'", "manifest-src 'self'", "base-uri 'none'", "form-action 'none'", "frame-ancestors 'none'",
].join('; ');

const types: Record<string, string> = {
  '.html': 'text/html; charset=utf-8', '.js': 'text/javascript; charset=utf-8', '.css': 'text/css; charset=utf-8',
  '.svg': 'image/svg+xml', '.png': 'image/png', '.ico': 'image/x-icon', '.json': 'application/json', '.txt': 'text/plain; charset=utf-8',
  '.woff2': 'font/woff2', '.map': 'application/json',
};

/** Where `npm run build` puts the console: `<repo>/dist/console`, from the sources or from dist/. */
export function defaultConsoleDir(): string | undefined {
  const here = import.meta.dirname;
  for (const c of [resolve(here, '..', '..', 'dist', 'console'), resolve(here, '..', '..', 'console')]) {
    if (existsSync(join(c, 'index.html'))) return c;
  }
  return undefined;
}

/** Marks a request as the console's, so the API's JSON header hook leaves its answer alone. */
export function isConsoleRequest(req: FastifyRequest): boolean {
  return (req as { fulcrumConsole?: boolean }).fulcrumConsole === true;
}

/** Resolves a URL path inside `root`; undefined for anything that is not a regular file there. */
export function consoleFile(root: string, urlPath: string): string | undefined {
  let rel: string;
  try {
    rel = decodeURIComponent(urlPath.split('?')[0] ?? '');
  } catch {
    return undefined;
  }
  if (rel.includes('\0') || rel.split(/[\\/]/).some((s) => s === '..')) return undefined;
  const full = resolve(root, '.' + (rel.startsWith('/') ? rel : `/${rel}`));
  if (full !== root && !full.startsWith(root + sep)) return undefined;
  try {
    // A symbolic link pointing out of the build folder is not served either.
    const real = realpathSync(full);
    if (!real.startsWith(root + sep) || !statSync(real).isFile()) return undefined;
    return real;
  } catch {
    return undefined;
  }
}

export function consoleRoutes(app: FastifyInstance, dir: string | undefined): void {
  const root = dir && existsSync(join(dir, 'index.html')) ? realpathSync(dir) : undefined;
  const send = (req: FastifyRequest, reply: FastifyReply, status: number, type: string, body: Buffer | string, cache: string) => {
    (req as { fulcrumConsole?: boolean }).fulcrumConsole = true;
    return reply.code(status).headers({
      'content-type': type, 'cache-control': cache, 'content-security-policy': consoleCsp,
      'x-content-type-options': 'nosniff', 'x-frame-options': 'DENY', 'referrer-policy': 'no-referrer',
      'cross-origin-opener-policy': 'same-origin',
    }).send(body);
  };
  const handler = async (req: FastifyRequest, reply: FastifyReply) => {
    if (!root) return send(req, reply, 404, types['.txt']!, 'The console is not built: run npm run build.\n', 'no-store');
    const rest = ((req.params as Record<string, string>)['*'] ?? '');
    const file = rest === '' ? undefined : consoleFile(root, rest);
    if (file) {
      const hashed = rest.startsWith('assets/');
      return send(req, reply, 200, types[extname(file)] ?? 'application/octet-stream', readFileSync(file), hashed ? 'public, max-age=31536000, immutable' : 'no-cache');
    }
    // A missing asset is a 404 (a stale page must not get HTML as its script); any other path is
    // a page of the app.
    if (rest.startsWith('assets/')) return send(req, reply, 404, types['.txt']!, 'not found\n', 'no-store');
    return send(req, reply, 200, types['.html']!, readFileSync(join(root, 'index.html')), 'no-cache');
  };
  // Relative asset URLs need the trailing slash: `/console` moves to `/console/`.
  app.get('/console', (req, reply) => {
    if ((req.url.split('?')[0] ?? '').endsWith('/')) return handler(req, reply);
    (req as { fulcrumConsole?: boolean }).fulcrumConsole = true;
    return reply.redirect('/console/', 302);
  });
  app.get('/console/*', handler);
}
