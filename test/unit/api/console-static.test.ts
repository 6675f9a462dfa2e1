import { mkdirSync, mkdtempSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { FastifyInstance } from 'fastify';
import pino from 'pino';
import { createHttpServer } from '../../../control-plane/api/server.js';
import { consoleCsp, consoleFile, consoleRoutes } from '../../../control-plane/api/console.js';

/** The console's static route (api/console.ts): the build folder only, the app for other paths. */
describe('console static files', () => {
  let root: string;
  let dir: string;
  let app: FastifyInstance;
  beforeAll(async () => {
    root = mkdtempSync(join(tmpdir(), 'console-static-'));
    dir = join(root, 'build');
    mkdirSync(join(dir, 'assets'), { recursive: true });
    writeFileSync(join(dir, 'index.html'), '<!doctype html><title>app</title>');
    writeFileSync(join(dir, 'assets', 'app-1.js'), 'console.log(1)');
    writeFileSync(join(root, 'secret.txt'), 'outside');
    symlinkSync(join(root, 'secret.txt'), join(dir, 'assets', 'link.js'));
    app = createHttpServer(pino({ level: 'silent' }) as any);
    consoleRoutes(app, dir);
    await app.ready();
  });
  afterAll(async () => {
    await app.close();
    rmSync(root, { recursive: true, force: true });
  });

  it('serves the index with a strict policy, and moves /console to /console/', async () => {
    const r = await app.inject('/console/');
    expect(r.statusCode).toBe(200);
    expect(r.headers['content-type']).toBe('text/html; charset=utf-8');
    expect(r.headers['content-security-policy']).toBe(consoleCsp);
    expect(consoleCsp).not.toContain('unsafe');
    expect(r.body).toContain('<title>app</title>');
    const moved = await app.inject('/console');
    expect(moved.statusCode).toBe(302);
    expect(moved.headers.location).toBe('/console/');
  });

  it('answers the app for client-side routes and a 404 for a missing asset', async () => {
    for (const p of ['/console/nodebalancers', '/console/databases/12', '/console/nope?x=1']) {
      const r = await app.inject(p);
      expect(r.statusCode, p).toBe(200);
      expect(r.body).toContain('<title>app</title>');
    }
    const js = await app.inject('/console/assets/app-1.js');
    expect(js.headers['content-type']).toBe('text/javascript; charset=utf-8');
    expect(js.headers['cache-control']).toContain('immutable');
    expect((await app.inject('/console/assets/gone.js')).statusCode).toBe(404);
  });

  it('never serves a file outside the build folder', async () => {
    for (const p of ['/console/..%2fsecret.txt', '/console/assets/..%2f..%2fsecret.txt', '/console/%2e%2e/secret.txt', '/console/assets/link.js']) {
      const r = await app.inject(p);
      expect(r.body, p).not.toContain('outside');
    }
    expect(consoleFile(dir, '../secret.txt')).toBeUndefined();
    expect(consoleFile(dir, 'assets/%2e%2e/%2e%2e/secret.txt')).toBeUndefined();
    expect(consoleFile(dir, 'assets/link.js')).toBeUndefined();
    expect(consoleFile(dir, 'a%00b')).toBeUndefined();
    expect(consoleFile(dir, '%E0%A4%A')).toBeUndefined();
    expect(consoleFile(dir, 'assets/app-1.js')).toBe(join(dir, 'assets', 'app-1.js'));
  });

  it('says how to build when there is no build', async () => {
    const bare = createHttpServer(pino({ level: 'silent' }) as any);
    consoleRoutes(bare, join(root, 'missing'));
    const r = await bare.inject('/console/');
    expect(r.statusCode).toBe(404);
    expect(r.body).toContain('npm run build');
    await bare.close();
  });
});
