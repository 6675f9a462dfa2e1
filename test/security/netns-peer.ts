import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';

/**
 * A network namespace of the test's own with IPv6 addresses on its `lo`, for limits that key on
 * an IPv6 prefix: the root namespace has `::1` only, and adding addresses or routes there would
 * change the machine every other test shares. Inside, `lo` is up (127/8 and `::1` work) and every
 * address given is added with `nodad`, so it is usable at once. Needs root (CAP_NET_ADMIN).
 *
 * A process runs inside with `run` (`ip netns exec`). `peer()` starts a small Node process inside
 * that sends datagrams and HTTP requests from chosen source addresses on the test's behalf (the
 * test's own sockets live in the root namespace and cannot use those addresses).
 */
export interface Netns {
  readonly name: string;
  /** `[cmd, args]` that runs `cmd args` inside the namespace (for spawn). */
  run(cmd: string, args: string[]): [string, string[]];
  peer(): Promise<NetnsPeer>;
  remove(): void;
}

export interface NetnsPeer {
  /** A UDP echo on 127.0.0.1 inside (answers `echo:<datagram>`); its port. */
  echo(): Promise<number>;
  /**
   * From each source, `flows` new flows (one socket each) send one datagram to [host]:port;
   * answers per source, once every flow is answered or `waitMs` has passed.
   */
  udp(host: string, port: number, sources: string[], flows: number, waitMs: number): Promise<Record<string, number>>;
  /** One GET from each source in turn; the statuses, in order. */
  http(url: string, sources: string[]): Promise<number[]>;
  /** GET `url` from inside (the data plane's /metrics). */
  text(url: string): Promise<string>;
  close(): void;
}

const PEER = String.raw`
const dgram = require('node:dgram');
const http = require('node:http');
const rl = require('node:readline').createInterface({ input: process.stdin });
const answer = (id, result) => process.stdout.write(JSON.stringify({ id, result }) + '\n');
rl.on('line', async (line) => {
  const m = JSON.parse(line);
  if (m.op === 'echo') {
    const s = dgram.createSocket('udp4');
    s.on('message', (msg, from) => s.send(Buffer.concat([Buffer.from('echo:'), msg]), from.port, from.address));
    s.bind(0, '127.0.0.1', () => answer(m.id, s.address().port));
  } else if (m.op === 'udp') {
    const got = {};
    const socks = [];
    for (const src of m.sources) {
      got[src] = 0;
      for (let i = 0; i < m.flows; i++) {
        const s = dgram.createSocket(src.includes(':') ? 'udp6' : 'udp4');
        socks.push(s);
        s.on('message', () => got[src]++);
        await new Promise((r) => s.bind(0, src, r));
        s.send('ping', m.port, m.host);
      }
    }
    const started = Date.now();
    const done = () => {
      const n = Object.values(got).reduce((a, b) => a + b, 0);
      if (n < socks.length && Date.now() - started < m.waitMs) return void setTimeout(done, 50);
      for (const s of socks) s.close();
      answer(m.id, got);
    };
    done();
  } else if (m.op === 'http') {
    const out = [];
    for (const src of m.sources) {
      out.push(await new Promise((r) => {
        const req = http.get(m.url, { localAddress: src, agent: false }, (res) => {
          res.resume();
          res.on('end', () => r(res.statusCode));
        });
        req.on('error', () => r(0));
      }));
    }
    answer(m.id, out);
  } else if (m.op === 'text') {
    answer(m.id, await fetch(m.url).then((r) => r.text(), (e) => 'error: ' + e.message));
  }
});
`;

export function createNetns(name: string, addresses: string[]): Netns {
  const ip = (...args: string[]) => {
    const r = spawnSync('ip', args, { encoding: 'utf8' });
    if (r.status !== 0) throw new Error(`ip ${args.join(' ')}: ${r.stderr.trim()}`);
  };
  // A namespace left by a killed earlier run of this file goes first.
  spawnSync('ip', ['netns', 'del', name]);
  ip('netns', 'add', name);
  ip('-n', name, 'link', 'set', 'lo', 'up');
  for (const a of addresses) ip('-n', name, 'addr', 'add', `${a}/64`, 'dev', 'lo', 'nodad');
  const peers: ChildProcess[] = [];
  const run = (cmd: string, args: string[]): [string, string[]] => ['ip', ['netns', 'exec', name, cmd, ...args]];
  return {
    name,
    run,
    async peer() {
      const [cmd, args] = run(process.execPath, ['-e', PEER]);
      const child = spawn(cmd, args, { stdio: ['pipe', 'pipe', 'inherit'] });
      peers.push(child);
      const waiting = new Map<number, (v: unknown) => void>();
      createInterface({ input: child.stdout! }).on('line', (line) => {
        const m = JSON.parse(line) as { id: number; result: unknown };
        waiting.get(m.id)?.(m.result);
        waiting.delete(m.id);
      });
      let next = 0;
      const ask = <T>(m: Record<string, unknown>): Promise<T> => new Promise((resolve) => {
        const id = ++next;
        waiting.set(id, resolve as (v: unknown) => void);
        child.stdin!.write(`${JSON.stringify({ ...m, id })}\n`);
      });
      return {
        echo: () => ask<number>({ op: 'echo' }),
        udp: (host, port, sources, flows, waitMs) => ask<Record<string, number>>({ op: 'udp', host, port, sources, flows, waitMs }),
        http: (url, sources) => ask<number[]>({ op: 'http', url, sources }),
        text: (url) => ask<string>({ op: 'text', url }),
        close: () => void child.kill('SIGKILL'),
      };
    },
    remove() {
      for (const p of peers) p.kill('SIGKILL');
      spawnSync('ip', ['netns', 'del', name]);
    },
  };
}
