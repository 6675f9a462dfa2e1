import type { SnapshotInput } from '../../../dataplane/config/validate.js';
import { freePort } from '../../helpers/tcp.js';
export { freePort };

type NbIn = NonNullable<SnapshotInput['nodebalancers']>[number];
type CfgIn = NonNullable<NbIn['configs']>[number];
type NodeIn = NonNullable<CfgIn['nodes']>[number];

let ids = 1000;
/** Unique ids across a test file so that config and node ids never collide by accident. */
export function nextId(): number {
  return ++ids;
}

export function node(address: string, extra: Partial<NodeIn> = {}): NodeIn {
  const id = nextId();
  return { id, label: `node-${id}`, address, weight: 1, mode: 'accept', ...extra };
}

export function config(port: number, nodes: NodeIn[], extra: Partial<CfgIn> = {}): CfgIn {
  return {
    id: nextId(), port, protocol: 'tcp', algorithm: 'roundrobin', stickiness: 'none', check: 'none',
    checkInterval: 5, checkTimeout: 3, checkAttempts: 2, checkPath: '/', checkBody: '', checkPassive: true,
    proxyProtocol: 'none', cipherSuite: 'recommended', sslCert: '', sslKey: '', nodes, ...extra,
  };
}

export function nodebalancer(ipv4: string, configs: CfgIn[], extra: Partial<NbIn> = {}): NbIn {
  return { id: nextId(), label: `nb-${ipv4}`, ipv4, clientConnThrottle: 0, configs, ...extra };
}

export function snapshot(version: number, nbs: NbIn[]): SnapshotInput & { version: number } {
  return { version, nonce: '', nodebalancers: nbs };
}

