/**
 * The data plane half of the stand-in control plane (control-plane-driver.ts): a real data plane
 * engine serving the database endpoints as the control plane would build them, from the desired
 * databases and the members the agent last reported (control-plane/push/endpoint-builder.ts). So
 * agent tests reach `host_primary` through a data plane, as users do.
 */
import { createProxyEngine, type ProxyEngine } from '../../../dataplane/engine.js';
import type { SnapshotInput } from '../../../dataplane/config/validate.js';
import { silentLogger } from '../../../lib/logger.js';
import { endpointsOf } from '../../../control-plane/push/endpoint-builder.js';
import type { DesiredDatabase } from '../../../proto/gen/fulcrum/v1/DesiredDatabase.js';
import type { ObservedDatabase__Output } from '../../../proto/gen/fulcrum/v1/ObservedDatabase.js';

export class DriverDataplane {
  readonly engine: ProxyEngine;
  /** The last snapshot the engine refused, if any (a test bug, reported by waitFor). */
  lastError?: Error;
  private applied = '';
  private version = 0;
  private chain: Promise<void> = Promise.resolve();

  constructor(readonly source: string) {
    this.engine = createProxyEngine({ logger: silentLogger(), endpoints: { sourceAddress: source } });
  }

  /** Serves the endpoints of `dbs`, routed by what the agent reported (only when that changed). */
  update(dbs: DesiredDatabase[], reported: (id: number) => ObservedDatabase__Output | undefined): void {
    const eps = dbs.flatMap((d) => {
      const id = Number(d.id);
      const o = reported(id);
      return endpointsOf({
        id, hostPrimary: d.hostPrimary ?? '', hostSecondary: d.hostSecondary ?? '', port: d.port ?? 3306, allowList: d.allowList ?? [],
        sslConnection: !!d.sslConnection, members: o?.members ?? {},
      }, o?.status === 'restoring');
    });
    const key = JSON.stringify(eps);
    if (key === this.applied) return;
    this.applied = key;
    const version = ++this.version;
    // endpointsOf gives plain numbers, never the Long its proto type allows.
    const databaseEndpoints = eps as NonNullable<SnapshotInput['databaseEndpoints']>;
    this.chain = this.chain.then(() => this.engine.apply({ version, databaseEndpoints })).then(
      () => void (this.lastError = undefined),
      (err: Error) => void (this.lastError = err),
    );
  }

  async close(): Promise<void> {
    await this.chain;
    await this.engine.close();
  }
}
