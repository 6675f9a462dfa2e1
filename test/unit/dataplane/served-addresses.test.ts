import { describe, expect, it } from 'vitest';
import { createProxyEngine } from '../../../dataplane/engine.js';
import { renderKeepalivedConfig } from '../../../dataplane/vrrp/keepalived-config.js';
import { config, freePort, nodebalancer, node } from '../../integration/dataplane/snapshot.js';

// In pair mode keepalived holds engine.addresses() (docs/multi-host.md): the NodeBalancers'
// addresses and the database endpoints' addresses, so hosts.primary moves with the pair.
describe('addresses a data plane serves', () => {
  it('are the NodeBalancer and database endpoint addresses, distinct and sorted, and follow the snapshot', async () => {
    const nbIp = '127.93.0.9';
    const epIp = '127.93.0.3';
    const [nbPort, epPort, sharedPort] = [await freePort(nbIp), await freePort(epIp), await freePort(nbIp)];
    const endpoint = (address: string, port: number, databaseId: number) => ({
      databaseId, role: 'primary' as const, address, port, allowList: ['127.0.0.0/8'], targets: [{ host: '127.93.1.1', port: 3306 }],
    });
    const engine = createProxyEngine();
    try {
      expect(engine.addresses()).toEqual([]);
      await engine.apply({
        version: 1,
        nodebalancers: [nodebalancer(nbIp, [config(nbPort, [node('127.93.1.2:80')])])],
        // One endpoint on its own address, one on the NodeBalancer's address (another port).
        databaseEndpoints: [endpoint(epIp, epPort, 1), endpoint(nbIp, sharedPort, 2)],
      });
      expect(engine.addresses()).toEqual([epIp, nbIp]);
      const held = /virtual_ipaddress_excluded \{([^}]*)\}/.exec(renderKeepalivedConfig({
        iface: 'eth0', peers: ['198.19.1.11'], priority: 100, routerId: 7, name: 'dp', addresses: engine.addresses(), checkScript: '/s', scriptUser: 'root',
      }))![1]!.trim().split('\n').map((l) => l.trim());
      expect(held).toEqual([`${epIp}/32 dev eth0`, `${nbIp}/32 dev eth0`]);

      // A database alone (no NodeBalancer) still has its address held.
      await engine.apply({ version: 2, nodebalancers: [], databaseEndpoints: [endpoint(epIp, epPort, 1)] });
      expect(engine.addresses()).toEqual([epIp]);
      // The database deleted: its address is released.
      await engine.apply({ version: 3, nodebalancers: [], databaseEndpoints: [] });
      expect(engine.addresses()).toEqual([]);
    } finally {
      await engine.close();
    }
  });

  it('keep the previous set when a snapshot is refused', async () => {
    const epIp = '127.93.0.5';
    const port = await freePort(epIp);
    const engine = createProxyEngine();
    try {
      await engine.apply({ version: 1, databaseEndpoints: [{ databaseId: 1, role: 'primary', address: epIp, port, allowList: [], targets: [] }] });
      await expect(engine.apply({ version: 2, databaseEndpoints: [{ databaseId: 1, role: 'primary', address: 'nope', port, allowList: [], targets: [] }] })).rejects.toThrow(/database_endpoints\[0\]\.address/);
      expect(engine.addresses()).toEqual([epIp]);
    } finally {
      await engine.close();
    }
  });
});
