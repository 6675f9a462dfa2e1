/**
 * Reads a V8 .cpuprofile (node --cpu-prof) and lists where the time went: self time per
 * function and per source file, so a bench run can point at the hot spot without a viewer.
 */
import { readFileSync } from 'node:fs';
import { fmt, table } from '../common/stats.js';

interface ProfileNode {
  id: number;
  callFrame: { functionName: string; url: string; lineNumber: number };
  hitCount?: number;
  children?: number[];
}

interface Profile {
  nodes: ProfileNode[];
  startTime: number;
  endTime: number;
  samples: number[];
  timeDeltas: number[];
}

function shortUrl(url: string): string {
  if (!url) return '(native)';
  const i = url.indexOf('/dist/');
  if (i >= 0) return url.slice(i + 6);
  if (url.startsWith('node:')) return url;
  return url.replace(/^file:\/\//, '').split('/').slice(-2).join('/');
}

/** Coarse buckets: socket syscalls made from JS, GC, Node's stream/net layers, our code. */
function group(name: string, url: string): string {
  if (name === '(garbage collector)') return 'garbage collector';
  if (name === '(program)') return 'V8/libuv outside JS (incl. reads in the event loop)';
  if (!url) return ['writeBuffer', 'writev', 'writeUtf8String', 'writeLatin1String'].includes(name) ? 'socket writes (syscall, loopback delivery)' : `native: ${name}`;
  if (url.includes('/dataplane/')) return 'our data plane code (dataplane/*)';
  if (url.startsWith('node:')) return `node internals (${url.includes('stream') ? 'streams' : url.replace('node:internal/', '').split('/')[0]})`;
  return 'other JS';
}

export function summarizeProfile(file: string, top = 25): string {
  const p = JSON.parse(readFileSync(file, 'utf8')) as Profile;
  const byId = new Map(p.nodes.map((n) => [n.id, n]));
  const selfUs = new Map<number, number>();
  for (let i = 0; i < p.samples.length; i++) {
    const id = p.samples[i]!;
    selfUs.set(id, (selfUs.get(id) ?? 0) + (p.timeDeltas[i] ?? 0));
  }
  const all = [...selfUs.values()].reduce((a, b) => a + b, 0) || 1;
  const fnSelf = new Map<string, number>();
  const fileSelf = new Map<string, number>();
  const groups = new Map<string, number>();
  let idle = 0;
  for (const [id, us] of selfUs) {
    const n = byId.get(id);
    if (!n) continue;
    const name = n.callFrame.functionName || '(anonymous)';
    // Shares are of the busy time: idle (waiting in epoll) says nothing about the hot path.
    if (name === '(idle)') {
      idle += us;
      continue;
    }
    const g = group(name, n.callFrame.url);
    groups.set(g, (groups.get(g) ?? 0) + us);
    const url = shortUrl(n.callFrame.url);
    const key = `${name}  ${url}${n.callFrame.url ? `:${n.callFrame.lineNumber + 1}` : ''}`;
    fnSelf.set(key, (fnSelf.get(key) ?? 0) + us);
    fileSelf.set(url, (fileSelf.get(url) ?? 0) + us);
  }
  const total = all - idle || 1;
  const pct = (us: number) => `${fmt((us / total) * 100, 1)}%`;
  const fnRows = [...fnSelf].sort((a, b) => b[1] - a[1]).slice(0, top).map(([k, us]) => [k, pct(us)]);
  const fileRows = [...fileSelf].sort((a, b) => b[1] - a[1]).slice(0, 12).map(([k, us]) => [k, pct(us)]);
  const groupRows = [...groups].sort((a, b) => b[1] - a[1]).slice(0, 10).map(([k, us]) => [k, pct(us)]);
  return [
    `sampled ${fmt(all / 1e6, 1)} s, of which busy ${fmt(total / 1e6, 1)} s (${fmt((total / all) * 100)}%); shares below are of the busy time`,
    table([['where (self time)', 'share'], ...groupRows]),
    '',
    table([['function (self time)', 'share'], ...fnRows]),
    '',
    table([['source (self time)', 'share'], ...fileRows]),
  ].join('\n');
}

// `node dist/bench/dataplane/profile.js FILE [TOP]` prints a summary of an existing profile.
if (process.argv[1]?.endsWith('/bench/dataplane/profile.js')) {
  process.stdout.write(summarizeProfile(process.argv[2]!, Number(process.argv[3] ?? 25)) + '\n');
}
