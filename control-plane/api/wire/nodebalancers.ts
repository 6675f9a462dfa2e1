import { wireTime } from '../../../lib/clock.js';
import type { NbConfig, NbNode, NodeBalancer } from '../../domain/nodebalancers/model.js';
import type { NodeBalancerTypeEntry } from '../../domain/nodebalancers/types.js';

/** Transfer in MB for the current month; all null until the NodeBalancer has seen traffic. */
export interface Transfer {
  in: number | null;
  out: number | null;
  total: number | null;
}

function hostnameFor(ipv4: string, suffix: string): string {
  return `${ipv4.replace(/\./g, '-')}${suffix}`;
}

export function nodeBalancerToWire(nb: NodeBalancer, transfer: Transfer, hostnameSuffix: string): Record<string, unknown> {
  return {
    id: nb.id,
    label: nb.label,
    region: nb.region,
    hostname: hostnameFor(nb.ipv4, hostnameSuffix),
    ipv4: nb.ipv4,
    ipv6: nb.ipv6,
    created: wireTime(nb.created),
    updated: wireTime(nb.updated),
    client_conn_throttle: nb.clientConnThrottle,
    client_udp_sess_throttle: nb.clientUdpSessThrottle,
    type: nb.type,
    // Fulcrum runs no LKE: no NodeBalancer belongs to a cluster.
    lke_cluster: null,
    tags: nb.tags,
    transfer,
  };
}

export function configToWire(c: NbConfig, nodes: NbNode[]): Record<string, unknown> {
  return {
    id: c.id,
    port: c.port,
    protocol: c.protocol,
    algorithm: c.algorithm,
    stickiness: c.stickiness,
    check: c.check,
    check_interval: c.checkInterval,
    check_timeout: c.checkTimeout,
    check_attempts: c.checkAttempts,
    check_path: c.checkPath,
    check_body: c.checkBody,
    check_passive: c.checkPassive,
    proxy_protocol: c.proxyProtocol,
    cipher_suite: c.cipherSuite,
    nodebalancer_id: c.nodebalancerId,
    ssl_commonname: c.sslCommonname,
    ssl_fingerprint: c.sslFingerprint,
    ssl_cert: c.sslCert ? '<REDACTED>' : null,
    ssl_key: c.sslKey ? '<REDACTED>' : null,
    udp_check_port: c.udpCheckPort,
    udp_session_timeout: c.udpSessionTimeout,
    nodes_status: {
      up: nodes.filter((n) => n.status === 'UP').length,
      down: nodes.filter((n) => n.status === 'DOWN').length,
    },
  };
}

export function nodeToWire(n: NbNode): Record<string, unknown> {
  return {
    id: n.id,
    address: n.address,
    label: n.label,
    status: n.status,
    weight: n.weight,
    mode: n.mode,
    config_id: n.configId,
    nodebalancer_id: n.nodebalancerId,
    // No VPCs on this server (docs/compatibility.md).
    vpc_config_id: null,
  };
}

/** A /nodebalancers/types item: the shape @linode/api-v4 (PriceType) and linodego read. */
export function nodeBalancerTypeToWire(t: NodeBalancerTypeEntry): Record<string, unknown> {
  return { id: t.typeId, label: t.label, price: { hourly: t.price[0], monthly: t.price[1] }, region_prices: t.regionPrices.map((p) => ({ ...p })), transfer: 0 };
}
