import type { ErrorCollector } from '../../lib/errors.js';
import { isIpv4, parseCidr } from '../../lib/ipv4.js';
import type { DbEndpointSpec, EndpointTargetSpec } from './endpoint-model.js';

/** A snapshot's database endpoints as they arrive (untrusted: every field optional). */
export type EndpointsInput = Array<{
  databaseId?: number | string;
  role?: string;
  address?: string;
  port?: number;
  allowList?: string[];
  requireTls?: boolean;
  targets?: Array<{ host?: string; port?: number }>;
}>;

const validPort = (p: unknown): p is number => Number.isInteger(p) && (p as number) >= 1 && (p as number) <= 65535;

/**
 * Checks the database endpoints of a snapshot into `errs` (the caller throws for the whole
 * snapshot). `seenListen` holds the NodeBalancer listeners already claimed, so an endpoint on
 * an address and port a NodeBalancer uses is refused like two NodeBalancers would be.
 */
export function validateEndpoints(input: EndpointsInput, errs: ErrorCollector, seenListen: Pick<Map<string, string>, 'get' | 'set'>): DbEndpointSpec[] {
  const out: DbEndpointSpec[] = [];
  input.forEach((e, i) => {
    const p = `database_endpoints[${i}]`;
    const databaseId = Number(e.databaseId);
    if (!Number.isSafeInteger(databaseId) || databaseId <= 0) errs.add(`${p}.database_id`, 'must be a positive integer');
    const role = e.role === 'secondary' ? 'secondary' : 'primary';
    if (e.role !== 'primary' && e.role !== 'secondary') errs.add(`${p}.role`, `must be one of primary, secondary; got ${JSON.stringify(e.role)}`);
    const address = e.address ?? '';
    if (!isIpv4(address)) errs.add(`${p}.address`, `must be an IPv4 address; got ${JSON.stringify(address)}`);
    const port = e.port ?? 0;
    if (!validPort(port)) errs.add(`${p}.port`, `must be 1..65535; got ${port}`);
    const listenKey = `${address}:${port}`;
    const other = seenListen.get(listenKey);
    if (other) errs.add(`${p}.port`, `${listenKey} is already used by ${other}`);
    seenListen.set(listenKey, p);
    const allowList = e.allowList ?? [];
    allowList.forEach((a, k) => {
      if (parseCidr(a.trim()) === undefined) errs.add(`${p}.allow_list[${k}]`, `must be an IPv4 address or CIDR; got ${JSON.stringify(a)}`);
    });
    const targets: EndpointTargetSpec[] = [];
    (e.targets ?? []).forEach((t, k) => {
      if (!isIpv4(t.host ?? '')) errs.add(`${p}.targets[${k}].host`, `must be an IPv4 address; got ${JSON.stringify(t.host)}`);
      if (!validPort(t.port)) errs.add(`${p}.targets[${k}].port`, `must be 1..65535; got ${t.port}`);
      targets.push(Object.freeze({ host: t.host ?? '', port: t.port ?? 0 }));
    });
    out.push(Object.freeze({
      databaseId, role, address, port, allowList: Object.freeze([...allowList]), requireTls: e.requireTls ?? false,
      targets: Object.freeze(targets), listenKey,
    }));
  });
  return out;
}
