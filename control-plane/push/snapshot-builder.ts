import type { NodeBalancerRepository } from '../domain/nodebalancers/repository.js';
import type { NodeBalancer } from '../domain/nodebalancers/model.js';
import { regionServed } from '../domain/regions.js';
import type { NodeBalancer as NbProto } from '../../proto/gen/fulcrum/v1/NodeBalancer.js';

/**
 * The NodeBalancers a data plane of `region` serves, in the proto shape. A data plane whose
 * region is `*` serves every region (the lab runs one data plane for everything).
 */
export function servedIn(all: { region: string; nb: NbProto }[], region: string): NbProto[] {
  return all.filter((x) => regionServed(region, x.region)).map((x) => x.nb);
}

export async function buildNodeBalancers(repo: NodeBalancerRepository, region: string): Promise<NbProto[]> {
  return servedIn(await buildAll(repo), region);
}

/** Every NodeBalancer in proto shape with its region, built once for all data planes. */
export async function buildAll(repo: NodeBalancerRepository): Promise<{ region: string; nb: NbProto }[]> {
  const out: { region: string; nb: NbProto }[] = [];
  for (const nb of await repo.list()) out.push(await buildOne(repo, nb));
  return out;
}

/** One NodeBalancer in proto shape (three indexed queries: the row, its configs, their nodes). */
export async function buildOne(repo: NodeBalancerRepository, nb: NodeBalancer): Promise<{ region: string; nb: NbProto }> {
  const configs = [];
  for (const c of await repo.configs(nb.id)) configs.push({ c, nodes: await repo.nodes(c.id) });
  return { region: nb.region, nb: {
    id: nb.id,
    label: nb.label,
    ipv4: nb.ipv4,
    ipv6: nb.ipv6 ?? '',
    clientConnThrottle: nb.clientConnThrottle,
    clientUdpSessThrottle: nb.clientUdpSessThrottle,
    type: nb.type,
    configs: configs.map(({ c, nodes }) => ({
      id: c.id,
      port: c.port,
      protocol: c.protocol,
      algorithm: c.algorithm,
      stickiness: c.stickiness,
      check: c.check,
      checkInterval: c.checkInterval,
      checkTimeout: c.checkTimeout,
      checkAttempts: c.checkAttempts,
      checkPath: c.checkPath,
      checkBody: c.checkBody,
      checkPassive: c.checkPassive,
      proxyProtocol: c.proxyProtocol,
      cipherSuite: c.cipherSuite,
      sslCert: c.sslCert ?? '',
      sslKey: c.sslKey ?? '',
      udpCheckPort: c.udpCheckPort,
      udpSessionTimeout: c.udpSessionTimeout,
      nodes: nodes.map((n) => ({ id: n.id, label: n.label, address: n.address, weight: n.weight, mode: n.mode })),
    })),
  } };
}
