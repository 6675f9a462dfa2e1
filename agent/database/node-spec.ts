import { join } from 'node:path';
import type { DesiredDatabase__Output } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import { renderNodeConfig } from '../mysql/config-render.js';
import { renderInitSql } from '../mysql/init-sql.js';
import type { ClusterTls } from '../mysql/tls.js';
import { LABEL_AGENT, LABEL_DATABASE, LABEL_MANAGED, LABEL_NODE, type NodeSpec } from '../runtime/container-runtime.js';
import { proxyNetworks } from './endpoints.js';
import { NODE_PORT, type DbState } from './state.js';

/**
 * A node's runtime name: `f<agent>-db<id>-n<k>`, where `<agent>` is the first 6 hex digits of
 * the SHA-256 of the agent id, so agents sharing a host never pick the same name.
 */
export function nodeName(agentKey: string, databaseId: number, k: number): string {
  return `f${agentKey}-db${databaseId}-n${k}`;
}

export interface NodeSpecInput {
  agentId: string;
  agentKey: string;
  databaseId: number;
  /** The database's folder; node k keeps its data in `n<k>/data` under it. */
  dir: string;
  desired: DesiredDatabase__Output;
  state: DbState;
  tls: ClusterTls;
  /** The encryption key file, for `encrypted` databases. */
  keyfile?: string;
  semiSync: boolean;
  /** Members on other agents too: semi-sync never falls back to asynchronous (config-render.ts). */
  spread?: boolean;
}

/** The spec node k must run with: the desired type and options, the binary or image in state.running. */
export function buildNodeSpec(i: NodeSpecInput, k: number): NodeSpec {
  const d = i.desired;
  const s = i.state;
  const files: Record<string, string> = {
    'ca.pem': i.tls.caPem,
    'server.pem': i.tls.serverCertPem,
    'server-key.pem': i.tls.serverKeyPem,
    'init.sql': renderInitSql({ adminPassword: i.state.adminPassword, replPassword: i.state.replPassword }),
  };
  if (d.encrypted && i.keyfile) files['keyfile'] = i.keyfile;
  return {
    name: nodeName(i.agentKey, i.databaseId, k),
    labels: {
      [LABEL_MANAGED]: 'true',
      [LABEL_AGENT]: i.agentId,
      [LABEL_DATABASE]: String(i.databaseId),
      [LABEL_NODE]: String(k),
    },
    engine: { id: d.engineId, version: s.running.version, binary: s.running.binary, image: s.running.image },
    dataDir: join(i.dir, `n${k}`, 'data'),
    config: renderNodeConfig({
      databaseId: i.databaseId,
      index: k,
      serverId: d.members.find((m) => m.index === k)?.serverId || k,
      memoryMb: d.type?.memoryMb || 1024,
      semiSync: i.semiSync,
      semiSyncNoFallback: !!i.spread,
      ssl: d.sslConnection,
      encrypted: d.encrypted,
      options: d.restartOptions,
      proxyNetworks: proxyNetworks(d.proxySources ?? []),
    }),
    files,
    host: s.addresses[k - 1]!,
    port: NODE_PORT,
    memoryMb: d.type?.memoryMb || 1024,
    cpus: d.type?.vcpus || 1,
  };
}
