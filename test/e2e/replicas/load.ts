import type { Outcome, ReplicaClient } from './client.js';

/**
 * A bounded loop of NodeBalancer writes (NodeBalancers, configs, nodes) by one worker, and the
 * ledger of what every worker's writes were answered. An entity is certain while every write
 * on it was acknowledged; a write whose answer was lost (`unknown`) widens what the end state
 * may hold (either value of a field, the entity present or absent) and the worker leaves that
 * entity alone afterwards. Workers share contested names on purpose (NodeBalancer labels, the
 * ports of one shared NodeBalancer) so that the replicas race for the same unique values.
 */

export interface Backend { name: string; address: string }
export interface NodeM { id: number; label: string; addresses: Set<string> }
export interface ConfigM { id: number; port: number; nodes: Map<number, NodeM>; maybeNodeLabels: string[] }
export interface NbM { id: number; owner: number; labels: Set<string>; ipv4: string; configs: Map<number, ConfigM>; maybePorts: number[] }

export const LABEL_TAKEN = 'Label must be unique among your NodeBalancers';
export const PORT_TAKEN = 'Port must be unique.';

export class Ledger {
  readonly nbs = new Map<number, NbM>();
  /** Acknowledged deletes, with the listener they closed (for the traffic check). */
  readonly deletedNbs = new Map<number, string>();
  readonly deletedConfigs = new Map<number, { nb: number; listener: string }>();
  readonly deletedNodes = new Set<number>();
  /** Entities whose delete was not answered: present or absent, both fine. */
  readonly maybeGone = { nbs: new Set<number>(), configs: new Set<number>(), nodes: new Set<number>() };
  /** Labels of NodeBalancers whose create was not answered. */
  readonly maybeNbLabels: string[] = [];
  readonly counts = { ok: 0, contested: 0, unknown: 0 };
  /** Answers that are product bugs: 5xx, or a 4xx the request did not deserve. */
  readonly failures: string[] = [];
  readonly unknowns: string[] = [];
  lastWriteAt = 0;
  private seq = 0;
  next(): number {
    return ++this.seq;
  }
}

export interface WorkerOpts {
  w: number;
  client: ReplicaClient;
  ledger: Ledger;
  rand: () => number;
  backends: Backend[];
  sharedNb: number;
  steps: number;
  /** Called before each step (the test kills a replica from here). */
  beforeStep?: (i: number) => Promise<void>;
  /** Resolves when every worker reached the same contested step, so that they race for real. */
  meet: () => Promise<void>;
}

/** A meeting point for `n` workers, reusable: each round resolves when all `n` arrived. */
export function barrier(n: number): () => Promise<void> {
  let waiting: (() => void)[] = [];
  return () => new Promise<void>((resolve) => {
    waiting.push(resolve);
    if (waiting.length === n) {
      for (const r of waiting) r();
      waiting = [];
    }
  });
}

/** The worker's own NodeBalancers it may still change (certain, not being deleted). */
function mine(o: WorkerOpts): NbM[] {
  return [...o.ledger.nbs.values()].filter((nb) => nb.owner === o.w && !o.ledger.maybeGone.nbs.has(nb.id) && nb.labels.size === 1);
}

function pick<T>(rand: () => number, list: T[]): T | undefined {
  return list.length ? list[Math.floor(rand() * list.length)] : undefined;
}

/** Records an answer; true when the write was acknowledged. `contested` is the one 400 this write may get. */
function settle(o: WorkerOpts, what: string, r: Outcome, contested?: { field: string; reason: string }): boolean {
  const l = o.ledger;
  l.lastWriteAt = Date.now();
  if (r.kind === 'ok') {
    l.counts.ok++;
    return true;
  }
  if (r.kind === 'unknown') {
    l.counts.unknown++;
    l.unknowns.push(`${what} via ${r.via}: ${r.error}`);
    return false;
  }
  const errs = (r.body?.errors ?? []) as { field?: string; reason: string }[];
  if (contested && r.status === 400 && errs.length === 1 && errs[0]!.field === contested.field && errs[0]!.reason === contested.reason) {
    l.counts.contested++;
  } else {
    l.failures.push(`${what} via ${r.via}: ${r.status} ${JSON.stringify(r.body)}`);
  }
  return false;
}

async function nodesOf(o: WorkerOpts, nb: number, cfg: number): Promise<Map<number, NodeM>> {
  const list = await o.client.all(`/v4/nodebalancers/${nb}/configs/${cfg}/nodes`);
  return new Map(list.map((n) => [n.id as number, { id: n.id as number, label: n.label as string, addresses: new Set([n.address as string]) }]));
}

async function createNb(o: WorkerOpts, label: string, contested: boolean): Promise<void> {
  const l = o.ledger;
  const port = 20_000 + o.w * 2000 + l.next();
  const address = pick(o.rand, o.backends)!.address;
  const r = await o.client.write('POST', '/v4/nodebalancers', {
    region: 'us-east', label, configs: [{ port, protocol: 'tcp', nodes: [{ label: `node-${l.next()}`, address }] }],
  });
  if (!settle(o, `create NodeBalancer ${label}`, r, contested ? { field: 'label', reason: LABEL_TAKEN } : undefined)) {
    if (r.kind === 'unknown') l.maybeNbLabels.push(label);
    return;
  }
  const body = (r as { body: any }).body;
  const nb: NbM = { id: body.id, owner: o.w, labels: new Set([label]), ipv4: body.ipv4, configs: new Map(), maybePorts: [] };
  for (const c of await o.client.all(`/v4/nodebalancers/${nb.id}/configs`)) {
    nb.configs.set(c.id, { id: c.id, port: c.port, nodes: await nodesOf(o, nb.id, c.id), maybeNodeLabels: [] });
  }
  l.nbs.set(nb.id, nb);
}

async function rename(o: WorkerOpts, nb: NbM, label: string, contested: boolean): Promise<void> {
  const r = await o.client.write('PUT', `/v4/nodebalancers/${nb.id}`, { label });
  if (settle(o, `rename ${nb.id} to ${label}`, r, contested ? { field: 'label', reason: LABEL_TAKEN } : undefined)) nb.labels = new Set([label]);
  else if (r.kind === 'unknown') nb.labels.add(label);
}

async function createConfig(o: WorkerOpts, nb: NbM, port: number, contested: boolean): Promise<void> {
  const r = await o.client.write('POST', `/v4/nodebalancers/${nb.id}/configs`, { port, protocol: 'tcp' });
  if (!settle(o, `config ${port} on ${nb.id}`, r, contested ? { field: 'port', reason: PORT_TAKEN } : undefined)) {
    if (r.kind === 'unknown') nb.maybePorts.push(port);
    return;
  }
  const cfg: ConfigM = { id: (r as { body: any }).body.id, port, nodes: new Map(), maybeNodeLabels: [] };
  nb.configs.set(cfg.id, cfg);
  await addNode(o, nb, cfg);
}

async function addNode(o: WorkerOpts, nb: NbM, cfg: ConfigM): Promise<void> {
  const used = new Set([...cfg.nodes.values()].flatMap((n) => [...n.addresses]));
  const address = pick(o.rand, o.backends.filter((b) => !used.has(b.address)).map((b) => b.address));
  if (!address) return;
  const label = `node-${o.ledger.next()}`;
  const r = await o.client.write('POST', `/v4/nodebalancers/${nb.id}/configs/${cfg.id}/nodes`, { label, address });
  if (settle(o, `node ${label} on ${nb.id}/${cfg.id}`, r)) cfg.nodes.set((r as { body: any }).body.id, { id: (r as { body: any }).body.id, label, addresses: new Set([address]) });
  else if (r.kind === 'unknown') cfg.maybeNodeLabels.push(label);
}

async function moveNode(o: WorkerOpts, nb: NbM, cfg: ConfigM, node: NodeM): Promise<void> {
  const used = new Set([...cfg.nodes.values()].flatMap((n) => [...n.addresses]));
  const address = pick(o.rand, o.backends.filter((b) => !used.has(b.address)).map((b) => b.address));
  if (!address) return;
  const r = await o.client.write('PUT', `/v4/nodebalancers/${nb.id}/configs/${cfg.id}/nodes/${node.id}`, { address });
  if (settle(o, `move node ${node.id} to ${address}`, r)) node.addresses = new Set([address]);
  else if (r.kind === 'unknown') node.addresses.add(address);
}

async function remove(o: WorkerOpts, what: string, path: string, done: () => void, maybe: () => void): Promise<void> {
  const r = await o.client.write('DELETE', path);
  if (settle(o, what, r)) done();
  else if (r.kind === 'unknown') maybe();
}

/** Configs of a NodeBalancer the worker may still change. */
function certainConfigs(o: WorkerOpts, nb: NbM): ConfigM[] {
  return [...nb.configs.values()].filter((c) => !o.ledger.maybeGone.configs.has(c.id));
}

export async function runWorker(o: WorkerOpts): Promise<void> {
  const l = o.ledger;
  for (let i = 0; i < o.steps; i++) {
    await o.beforeStep?.(i);
    const own = mine(o);
    const r = o.rand();
    const nb = pick(o.rand, own);
    const cfg = nb && pick(o.rand, certainConfigs(o, nb));
    const nodes = cfg ? [...cfg.nodes.values()].filter((n) => !l.maybeGone.nodes.has(n.id) && n.addresses.size === 1) : [];
    // Every fourth step, the workers meet and make the same write at once through their
    // replicas: a NodeBalancer label, a port of the shared NodeBalancer, or a rename to one label.
    const k = Math.floor(i / 4);
    if (i % 4 === 3) {
      await o.meet();
      if (k % 3 === 0 || own.length === 0) await createNb(o, `harep-shared-${k}`, true);
      else if (k % 3 === 1) await createConfig(o, l.nbs.get(o.sharedNb)!, 31_000 + k, true);
      else await rename(o, own[0]!, `harep-renamed-${k}`, true);
    } else if (own.length < 2 || (r < 0.15 && own.length < 6)) {
      await createNb(o, `harep-w${o.w}-${l.next()}`, false);
    } else if (r < 0.3 || !nb) {
      await rename(o, nb ?? own[0]!, `harep-w${o.w}-${l.next()}`, false);
    } else if (r < 0.45) {
      await createConfig(o, nb, 20_000 + o.w * 2000 + l.next(), false);
    } else if (r < 0.6 && cfg && nodes.length) {
      await moveNode(o, nb, cfg, pick(o.rand, nodes)!);
    } else if (r < 0.7 && cfg && cfg.nodes.size < 2) {
      await addNode(o, nb, cfg);
    } else if (r < 0.78 && cfg && nodes.length >= 2) {
      const node = nodes[0]!;
      await remove(o, `delete node ${node.id}`, `/v4/nodebalancers/${nb.id}/configs/${cfg.id}/nodes/${node.id}`,
        () => {
          cfg.nodes.delete(node.id);
          l.deletedNodes.add(node.id);
        }, () => l.maybeGone.nodes.add(node.id));
    } else if (r < 0.86 && cfg && certainConfigs(o, nb).length > 1) {
      await remove(o, `delete config ${cfg.id}`, `/v4/nodebalancers/${nb.id}/configs/${cfg.id}`,
        () => {
          nb.configs.delete(cfg.id);
          l.deletedConfigs.set(cfg.id, { nb: nb.id, listener: `${nb.ipv4}:${cfg.port}` });
        }, () => l.maybeGone.configs.add(cfg.id));
    } else if (r < 0.94 && own.length > 2) {
      await remove(o, `delete NodeBalancer ${nb.id}`, `/v4/nodebalancers/${nb.id}`, () => {
        l.nbs.delete(nb.id);
        l.deletedNbs.set(nb.id, nb.ipv4);
        for (const c of nb.configs.values()) l.deletedConfigs.set(c.id, { nb: nb.id, listener: `${nb.ipv4}:${c.port}` });
      }, () => l.maybeGone.nbs.add(nb.id));
    } else {
      await rename(o, nb, `harep-w${o.w}-${l.next()}`, false);
    }
  }
}
