import type { Router } from '../router.js';
import { idParam } from '../router.js';
import { applyFilter, parseFilter } from '../filter.js';
import { paginate, parsePage } from '../pagination.js';
import type { NodeBalancerService } from '../../domain/nodebalancers/nodebalancer-service.js';
import type { NodeBalancerRepository } from '../../domain/nodebalancers/repository.js';
import type { NodeBalancer } from '../../domain/nodebalancers/model.js';
import { configToWire, nodeBalancerToWire, nodeBalancerTypeToWire, nodeToWire, type Transfer } from '../wire/nodebalancers.js';
import { nodeBalancerTypes } from '../../domain/nodebalancers/types.js';
import type { StatsService } from '../../domain/nodebalancers/stats-service.js';

const R = 'nodebalancers:read_only';
const W = 'nodebalancers:read_write';

export interface NodeBalancerRouteDeps {
  service: NodeBalancerService;
  repo: NodeBalancerRepository;
  stats: StatsService;
  hostnameSuffix: string;
}

/** /nodebalancers and everything under it. */
export function nodeBalancerRoutes(r: Router, d: NodeBalancerRouteDeps): void {
  const nbWire = async (nb: NodeBalancer) => nodeBalancerToWire(nb, (await d.stats.transfer(nb.id)) as Transfer, d.hostnameSuffix);
  const configWire = async (c: Parameters<typeof configToWire>[0]) => configToWire(c, await d.repo.nodes(c.id));
  const all = <T, U>(xs: T[], f: (x: T) => Promise<U>) => Promise.all(xs.map(f));
  const nb = (p: Record<string, string>) => idParam(p, 'nodeBalancerId');
  const cfg = (p: Record<string, string>) => idParam(p, 'configId');

  r.get('/nodebalancers', R, async (c) => {
    const page = parsePage(c.query);
    const filter = parseFilter(c.headers['x-filter'] as string | undefined, ['label', 'region', 'ipv4', 'tags']);
    return paginate(applyFilter(await all(await d.service.list(c.actor), nbWire), filter), page);
  });
  r.post('/nodebalancers', W, async (c) => nbWire(await d.service.create(c.actor, c.body)));
  r.publicGet('/nodebalancers/types', (c) => paginate(nodeBalancerTypes.map(nodeBalancerTypeToWire), parsePage(c.query)));
  r.get('/nodebalancers/:nodeBalancerId', R, async (c) => nbWire(await d.service.get(c.actor, nb(c.params))));
  r.put('/nodebalancers/:nodeBalancerId', W, async (c) => nbWire(await d.service.update(c.actor, nb(c.params), c.body)));
  r.delete('/nodebalancers/:nodeBalancerId', W, async (c) => {
    await d.service.delete(c.actor, nb(c.params));
    return {};
  });

  r.get('/nodebalancers/:nodeBalancerId/stats', R, async (c) => d.stats.stats(await d.service.get(c.actor, nb(c.params))));
  r.get('/nodebalancers/:nodeBalancerId/firewalls', R, async (c) => {
    const page = parsePage(c.query);
    await d.service.get(c.actor, nb(c.params));
    return paginate([], page);
  });

  // Configs and Nodes have no filterable fields (docs/compatibility.md): any filter key is `Cannot filter on <x>`,
  // an empty filter or ordering-free header is accepted.
  r.get('/nodebalancers/:nodeBalancerId/configs', R, async (c) => {
    const page = parsePage(c.query);
    const filter = parseFilter(c.headers['x-filter'] as string | undefined, []);
    return paginate(applyFilter(await all(await d.service.configs(c.actor, nb(c.params)), configWire), filter), page);
  });
  r.post('/nodebalancers/:nodeBalancerId/configs', W, async (c) => configWire(await d.service.createConfig(c.actor, nb(c.params), c.body)));
  r.get('/nodebalancers/:nodeBalancerId/configs/:configId', R, async (c) => configWire(await d.service.config(c.actor, nb(c.params), cfg(c.params))));
  r.put('/nodebalancers/:nodeBalancerId/configs/:configId', W, async (c) =>
    configWire(await d.service.updateConfig(c.actor, nb(c.params), cfg(c.params), c.body)),
  );
  r.delete('/nodebalancers/:nodeBalancerId/configs/:configId', W, async (c) => {
    await d.service.deleteConfig(c.actor, nb(c.params), cfg(c.params));
    return {};
  });
  r.post('/nodebalancers/:nodeBalancerId/configs/:configId/rebuild', W, async (c) =>
    configWire(await d.service.rebuild(c.actor, nb(c.params), cfg(c.params), c.body)),
  );

  r.get('/nodebalancers/:nodeBalancerId/configs/:configId/nodes', R, async (c) => {
    const page = parsePage(c.query);
    const filter = parseFilter(c.headers['x-filter'] as string | undefined, []);
    return paginate(applyFilter((await d.service.nodes(c.actor, nb(c.params), cfg(c.params))).map(nodeToWire), filter), page);
  });
  r.post('/nodebalancers/:nodeBalancerId/configs/:configId/nodes', W, async (c) =>
    nodeToWire(await d.service.createNode(c.actor, nb(c.params), cfg(c.params), c.body)),
  );
  r.get('/nodebalancers/:nodeBalancerId/configs/:configId/nodes/:nodeId', R, async (c) =>
    nodeToWire(await d.service.node(c.actor, nb(c.params), cfg(c.params), idParam(c.params, 'nodeId'))),
  );
  r.put('/nodebalancers/:nodeBalancerId/configs/:configId/nodes/:nodeId', W, async (c) =>
    nodeToWire(await d.service.updateNode(c.actor, nb(c.params), cfg(c.params), idParam(c.params, 'nodeId'), c.body)),
  );
  r.delete('/nodebalancers/:nodeBalancerId/configs/:configId/nodes/:nodeId', W, async (c) => {
    await d.service.deleteNode(c.actor, nb(c.params), cfg(c.params), idParam(c.params, 'nodeId'));
    return {};
  });
}
