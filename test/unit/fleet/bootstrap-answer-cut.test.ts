/**
 * A host's calls to the bootstrap endpoint (lib/fleet-host.ts) against a real HTTPS server that
 * goes away in the middle of its answer (a control plane stopped or killed mid-response): the
 * call must fail, as a refused connection does, so that a join reports it and a renewal is tried
 * again; a call left waiting for the rest of the answer for good would never renew the
 * certificate, which then expires.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { createServer, type Server } from 'node:https';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, describe, expect, it } from 'vitest';
import { formatJoinToken, joinFleet } from '../../../lib/fleet-host.js';
import { makeCa, makeCert } from '../../helpers/certs.js';

describe('a bootstrap answer cut in the middle', () => {
  let server: Server | undefined;
  let dir: string | undefined;
  afterEach(async () => {
    await new Promise((resolve) => (server ? server.close(resolve) : resolve(undefined)));
    if (dir) rmSync(dir, { recursive: true, force: true });
  });

  it('fails the join instead of waiting for the rest for good', async () => {
    const leaf = makeCert(makeCa(), '127.0.0.1');
    let answered = 0;
    server = createServer({ key: leaf.key, cert: leaf.cert }, (_req, res) => {
      answered++;
      res.writeHead(200, { 'content-type': 'application/json', 'content-length': '4096' });
      // A part of the promised body, then the connection is gone.
      res.write('{"caPem":"-----BEGIN CERTIFICATE-----', () => res.socket?.destroy());
    });
    const port = await new Promise<number>((resolve) => server!.listen(0, '127.0.0.1', () => resolve((server!.address() as { port: number }).port)));
    dir = mkdtempSync(join(tmpdir(), 'fulcrum-answer-cut-'));
    const token = formatJoinToken({ port, id: 'ab12cd34', secret: 'f'.repeat(32), pin: '0'.repeat(64) });
    await expect(joinFleet({ controlPlane: '127.0.0.1:1', token, role: 'agent', stateDir: dir })).rejects.toThrow(/aborted|closed|reset/i);
    expect(answered).toBe(1);
  });
});
