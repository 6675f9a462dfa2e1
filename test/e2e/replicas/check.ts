import { ask } from '../../helpers/tcp.js';
import type { ReplicaClient } from './client.js';
import type { Backend, Ledger } from './load.js';

export interface FinalNb { id: number; label: string; ipv4: string; configs: { id: number; port: number; nodes: { id: number; label: string; address: string }[] }[] }

/** The NodeBalancers the loop may have made (its labels all start with `harep-`), read back whole. */
export async function readFinal(client: ReplicaClient): Promise<FinalNb[]> {
  const nbs = (await client.all('/v4/nodebalancers')).filter((n) => String(n.label).startsWith('harep-'));
  // In parallel: the data plane's 5 s run from the last write, and this read is not part of it.
  const out: FinalNb[] = await Promise.all(nbs.map(async (nb) => {
    const configs = await Promise.all((await client.all(`/v4/nodebalancers/${nb.id}/configs`)).map(async (c) => ({
      id: c.id as number,
      port: c.port as number,
      nodes: (await client.all(`/v4/nodebalancers/${nb.id}/configs/${c.id}/nodes`)).map((n) => ({ id: n.id as number, label: n.label as string, address: n.address as string })),
    })));
    return { id: nb.id as number, label: nb.label as string, ipv4: nb.ipv4 as string, configs };
  }));
  return out;
}

/**
 * What the API holds against what it acknowledged: every acknowledged write present, every
 * acknowledged delete absent, nothing the loop did not (or may not) have made, unique labels,
 * addresses and ports. Returns the problems found (none: an empty list).
 */
export function compare(final: FinalNb[], l: Ledger): string[] {
  const problems: string[] = [];
  const byId = new Map(final.map((nb) => [nb.id, nb]));
  const unique = (what: string, values: unknown[]) => {
    if (new Set(values).size !== values.length) problems.push(`${what} not unique: ${JSON.stringify(values)}`);
  };
  unique('NodeBalancer ids', final.map((nb) => nb.id));
  unique('NodeBalancer labels', final.map((nb) => nb.label));
  unique('NodeBalancer addresses', final.map((nb) => nb.ipv4));
  for (const nb of final) {
    unique(`ports of ${nb.id}`, nb.configs.map((c) => c.port));
    for (const c of nb.configs) unique(`node addresses of ${nb.id}/${c.id}`, c.nodes.map((n) => n.address));
  }
  unique('config ids', final.flatMap((nb) => nb.configs.map((c) => c.id)));
  unique('node ids', final.flatMap((nb) => nb.configs.flatMap((c) => c.nodes.map((n) => n.id))));

  for (const m of l.nbs.values()) {
    const f = byId.get(m.id);
    if (!f) {
      if (!l.maybeGone.nbs.has(m.id)) problems.push(`NodeBalancer ${m.id} (${[...m.labels].join('|')}) acknowledged but missing`);
      continue;
    }
    if (!m.labels.has(f.label)) problems.push(`NodeBalancer ${m.id} is labelled ${f.label}, acknowledged ${[...m.labels].join('|')}`);
    const cfgs = new Map(f.configs.map((c) => [c.id, c]));
    for (const mc of m.configs.values()) {
      const fc = cfgs.get(mc.id);
      if (!fc) {
        if (!l.maybeGone.configs.has(mc.id)) problems.push(`config ${m.id}/${mc.id} (port ${mc.port}) acknowledged but missing`);
        continue;
      }
      if (fc.port !== mc.port) problems.push(`config ${mc.id} has port ${fc.port}, acknowledged ${mc.port}`);
      const nodes = new Map(fc.nodes.map((n) => [n.id, n]));
      for (const mn of mc.nodes.values()) {
        const fn = nodes.get(mn.id);
        if (!fn) {
          if (!l.maybeGone.nodes.has(mn.id)) problems.push(`node ${mc.id}/${mn.id} acknowledged but missing`);
        } else if (!mn.addresses.has(fn.address)) problems.push(`node ${mn.id} at ${fn.address}, acknowledged ${[...mn.addresses].join('|')}`);
      }
      for (const fn of fc.nodes) {
        if (!mc.nodes.has(fn.id) && !l.maybeGone.nodes.has(fn.id) && !mc.maybeNodeLabels.includes(fn.label)) problems.push(`node ${fn.id} (${fn.label}) on ${mc.id} was never acknowledged`);
      }
    }
    for (const fc of f.configs) {
      if (!m.configs.has(fc.id) && !l.maybeGone.configs.has(fc.id) && !m.maybePorts.includes(fc.port)) problems.push(`config ${fc.id} (port ${fc.port}) on ${m.id} was never acknowledged`);
    }
  }
  for (const f of final) {
    if (!l.nbs.has(f.id) && !l.maybeGone.nbs.has(f.id) && !l.maybeNbLabels.includes(f.label)) problems.push(`NodeBalancer ${f.id} (${f.label}) was never acknowledged`);
  }
  for (const id of l.deletedNbs.keys()) if (byId.has(id)) problems.push(`NodeBalancer ${id} deleted (acknowledged) but present`);
  const configIds = new Set(final.flatMap((nb) => nb.configs.map((c) => c.id)));
  for (const id of l.deletedConfigs.keys()) if (configIds.has(id)) problems.push(`config ${id} deleted (acknowledged) but present`);
  const nodeIds = new Set(final.flatMap((nb) => nb.configs.flatMap((c) => c.nodes.map((n) => n.id))));
  for (const id of l.deletedNodes) if (nodeIds.has(id)) problems.push(`node ${id} deleted (acknowledged) but present`);
  return problems;
}

/**
 * Real traffic against the final state: every listener of it answers only with the names of its
 * nodes' backends and, over a few connections, with each of them (round robin); every listener
 * an acknowledged delete closed (and no final config reuses) refuses. After the last write
 * nothing changes any more, so a listener that matched once stays matched: each pass checks only
 * the listeners that did not match yet, and `servedAt` keeps when each one first did (the end of
 * its check, an upper bound). Returns the listeners that do not match yet, with why.
 */
export class TrafficCheck {
  readonly servedAt = new Map<string, number>();
  private readonly checks = new Map<string, () => Promise<string | undefined>>();

  constructor(final: FinalNb[], l: Ledger, backends: Backend[]) {
    const nameOf = new Map(backends.map((b) => [b.address, b.name]));
    for (const nb of final) {
      for (const c of nb.configs) {
        const want = new Set(c.nodes.map((n) => nameOf.get(n.address) ?? `?${n.address}`));
        this.checks.set(`${nb.ipv4}:${c.port}`, () => serves(nb.ipv4, c.port, want));
      }
    }
    for (const { listener } of l.deletedConfigs.values()) {
      if (this.checks.has(listener)) continue;
      const at = listener.lastIndexOf(':');
      this.checks.set(listener, () => ask(listener.slice(0, at), Number(listener.slice(at + 1)), 'hi', { timeoutMs: 1500 })
        .then((a) => `${listener} deleted but answered ${a}`, () => undefined));
    }
  }

  async pass(): Promise<string[]> {
    const pending = [...this.checks].filter(([listener]) => !this.servedAt.has(listener));
    const results = await Promise.all(pending.map(async ([listener, check]) => {
      const problem = await check();
      if (problem === undefined) this.servedAt.set(listener, Date.now());
      return problem;
    }));
    return results.filter((x): x is string => x !== undefined);
  }

  get size(): number {
    return this.checks.size;
  }
}

/** Whether ip:port answers with exactly the backends `want` names (none: it answers nothing). */
async function serves(ip: string, port: number, want: Set<string>): Promise<string | undefined> {
  const seen = new Set<string>();
  for (let i = 0; i < Math.max(1, want.size * 2); i++) {
    let answer: string;
    try {
      answer = await ask(ip, port, 'hi', { timeoutMs: 1500 });
    } catch (err) {
      return want.size === 0 ? undefined : `${ip}:${port}: ${(err as Error).message}`;
    }
    if (want.size === 0) return `${ip}:${port} has no nodes but answered ${answer}`;
    seen.add(answer.split(':')[0]!);
  }
  const extra = [...seen].filter((s) => !want.has(s));
  if (extra.length || seen.size !== want.size) return `${ip}:${port} answered ${[...seen].join(',')}, nodes are ${[...want].join(',')}`;
  return undefined;
}
