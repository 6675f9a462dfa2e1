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
 * One pass over real traffic: every listener of the final state answers only with the names of
 * its nodes' backends and, over a few connections, with each of them (round robin); every
 * listener an acknowledged delete closed (and no final config reuses) refuses. Returns what
 * does not match yet.
 */
export async function trafficMismatches(final: FinalNb[], l: Ledger, backends: Backend[]): Promise<string[]> {
  const nameOf = new Map(backends.map((b) => [b.address, b.name]));
  const open = new Set<string>();
  const checks: Promise<string | undefined>[] = [];
  for (const nb of final) {
    for (const c of nb.configs) {
      const listener = `${nb.ipv4}:${c.port}`;
      open.add(listener);
      const want = new Set(c.nodes.map((n) => nameOf.get(n.address) ?? `?${n.address}`));
      checks.push((async () => {
        const seen = new Set<string>();
        for (let i = 0; i < Math.max(1, want.size * 2); i++) {
          let answer: string;
          try {
            answer = await ask(nb.ipv4, c.port, 'hi', { timeoutMs: 1500 });
          } catch (err) {
            if (want.size === 0) return undefined;
            return `${listener}: ${(err as Error).message}`;
          }
          if (want.size === 0) return `${listener} has no nodes but answered ${answer}`;
          seen.add(answer.split(':')[0]!);
        }
        const extra = [...seen].filter((s) => !want.has(s));
        if (extra.length || seen.size !== want.size) return `${listener} answered ${[...seen].join(',')}, nodes are ${[...want].join(',')}`;
        return undefined;
      })());
    }
  }
  for (const { listener } of l.deletedConfigs.values()) {
    if (open.has(listener)) continue;
    const [ip, port] = [listener.slice(0, listener.lastIndexOf(':')), Number(listener.slice(listener.lastIndexOf(':') + 1))];
    checks.push(ask(ip, port, 'hi', { timeoutMs: 1500 }).then((a) => `${listener} deleted but answered ${a}`, () => undefined));
  }
  return (await Promise.all(checks)).filter((x): x is string => x !== undefined);
}
