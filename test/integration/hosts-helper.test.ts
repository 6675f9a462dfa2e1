import { spawn } from 'node:child_process';
import { afterAll, describe, expect, it } from 'vitest';
import { claimHosts, createHosts, defaultSubnet, leftovers, sh, type Host, type HostNet } from '../helpers/hosts.js';
import { repoRoot, until } from '../helpers/lab.js';

// The network-namespace hosts of test/helpers/hosts.ts: traffic flows between hosts, a link taken
// down stops it, and teardown (also of a run killed halfway) leaves nothing on the machine; a
// run that is still alive keeps its prefix (another createHosts waits instead of killing it).
const PREFIX = 'fhtst';

/** A TCP echo-of-name server on `host`:7000, started inside the host. */
function serve(host: Host) {
  return host.spawn(process.execPath, ['-e', `require('net').createServer((s) => s.end('hello from ${host.name}')).listen(7000, '0.0.0.0', () => console.log('up'))`]);
}

/** Connects from `from` to ip:7000 with a deadline; the reply or an error word. */
async function connect(from: Host, ip: string): Promise<string> {
  const script = `const s = require('net').connect(7000, '${ip}'); let d = ''; s.setTimeout(1500, () => { console.log('timeout'); process.exit(0); });
    s.on('data', (c) => (d += c)); s.on('end', () => { console.log(d); process.exit(0); }); s.on('error', (e) => { console.log(e.code); process.exit(0); });`;
  const r = await from.exec(process.execPath, ['-e', script], { timeoutMs: 20_000 });
  return r.stdout.trim();
}

describe('hosts helper (network namespaces on a bridge)', () => {
  let net: HostNet | undefined;
  afterAll(async () => {
    await net?.teardown();
  });

  it('carries TCP between hosts and from the test, stops it on link down, and tears down to nothing', async () => {
    // An earlier run in another process (another checkout's, say): its hosts and a server on x.
    const other = spawn(process.execPath, ['--import', 'tsx', '-e', `import('./test/helpers/hosts.ts').then(async (m) => {
      const net = await m.createHosts({ prefix: '${PREFIX}', names: ['a', 'b', 'x'] });
      net.hosts[2].spawn(process.execPath, ['-e', "require('net').createServer((s) => s.end('stale')).listen(7000, '0.0.0.0')"]);
      console.log('built'); setInterval(() => {}, 1000); })`], { cwd: repoRoot, stdio: ['ignore', 'pipe', 'inherit'] });
    const gone = new Promise((r) => other.once('exit', r));
    try {
      await new Promise<void>((ok, fail) => {
        other.stdout!.on('data', (d: Buffer) => (d.toString().includes('built') ? ok() : undefined));
        other.once('exit', (code) => fail(new Error(`the other run exited (${code})`)));
      });
      const stale = async () => (await sh('ip', ['netns', 'exec', `${PREFIX}-x`, 'ss', '-ltn'], true)).stdout.includes(':7000');
      await until('stale server', stale, 30_000, 100);
      // While it lives, its prefix is its own: a claim waits, then fails, and nothing of it is touched.
      await expect(claimHosts(PREFIX, defaultSubnet(PREFIX), 1000)).rejects.toThrow(/netns prefix fhtst .* is held by another test run/);
      expect(await stale()).toBe(true);
    } finally {
      // Killed, not torn down: a "killed earlier run", whose hosts and server stay behind.
      other.kill('SIGKILL');
      await gone;
    }

    net = await createHosts({ prefix: PREFIX, names: ['a', 'b'] });
    expect((await leftovers(PREFIX)).filter((l) => l.includes('-x'))).toEqual([]);
    const [a, b] = net.hosts as [Host, Host];
    expect(a.ip).not.toEqual(b.ip);
    expect(a.ip.startsWith('198.19.')).toBe(true);
    serve(b);
    await until('server on b', async () => (await b.exec('ss', ['-ltn'])).stdout.includes(':7000'), 30_000, 100);

    expect(await connect(a, b.ip)).toBe('hello from b');
    // Loopback is up inside each host.
    expect(await connect(b, '127.0.0.1')).toBe('hello from b');
    // The test process (root namespace) reaches the hosts through the bridge address.
    const fromRoot = await sh(process.execPath, ['-e', `require('net').connect(7000, '${b.ip}').on('data', (d) => { console.log(String(d)); process.exit(0); })`]);
    expect(fromRoot.stdout.trim()).toBe('hello from b');

    await a.linkDown();
    expect(await connect(a, b.ip)).not.toBe('hello from b');
    const carrier = await a.exec('ip', ['link', 'show', 'eth0']);
    expect(carrier.stdout).toContain('NO-CARRIER');
    await a.linkUp();
    await until('traffic after link up', async () => (await connect(a, b.ip)) === 'hello from b', 30_000, 200);

    expect((await leftovers(PREFIX)).length).toBeGreaterThan(0);
    await net.teardown();
    net = undefined;
    expect(await leftovers(PREFIX)).toEqual([]);
    expect((await sh('ip', ['netns', 'list'])).stdout).not.toContain(`${PREFIX}-`);
    expect((await sh('ip', ['-o', 'link', 'show'])).stdout).not.toContain(`${PREFIX}-`);
    expect((await sh('iptables', ['-S', 'FORWARD'])).stdout).not.toContain(`${PREFIX}-`);
  });
});
