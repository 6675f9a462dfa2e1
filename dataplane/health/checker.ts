import { setMaxListeners } from 'node:events';
import type { Clock, Timer } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import type { ConfigSpec } from '../config/model.js';
import type { NodeState } from '../runtime/node-state.js';
import { probe, type ProbeSpec } from './probe.js';

/** Interval used to bring back a node that passive checks took down when check is `none`. */
const RECOVERY_INTERVAL_MS = 5_000;
const RECOVERY_TIMEOUT_MS = 3_000;

/**
 * Runs the active checks of one config: one timer chain per node (reject nodes are not checked).
 * It only reports results; rise/fall decisions are the owner's (`report`). With check `none` it
 * probes only nodes that passive checks marked DOWN, so they can come back.
 */
export class HealthChecker {
  private readonly timers = new Map<NodeState, Timer>();
  private stopped = false;
  /** Aborted at stop: probes in flight end at once, and their check_body matches are dropped. */
  private readonly stopping = new AbortController();

  constructor(
    private readonly spec: ConfigSpec,
    private readonly nodes: () => readonly NodeState[],
    private readonly report: (node: NodeState, failure: string | null) => void,
    private readonly clock: Clock,
    private readonly log: Logger,
  ) {
    // One listener per probe in flight, one probe per node: no leak to warn about.
    setMaxListeners(0, this.stopping.signal);
  }

  start(): void {
    // check none: nothing to do until passive checks take a node down (recover()).
    if (this.spec.check === 'none') return;
    // First probes spread over up to a second so that a big snapshot does not fire them all at once.
    for (const node of this.nodes()) this.schedule(node, Math.floor(Math.random() * Math.min(1000, this.spec.checkIntervalMs)));
  }

  /** check none: probe a passively failed node until it passes again. */
  recover(node: NodeState): void {
    if (this.spec.check !== 'none' || this.timers.has(node)) return;
    this.schedule(node, RECOVERY_INTERVAL_MS);
  }

  stop(): void {
    this.stopped = true;
    this.stopping.abort();
    for (const t of this.timers.values()) t.cancel();
    this.timers.clear();
  }

  private schedule(node: NodeState, delay: number): void {
    if (this.stopped || node.spec.mode === 'reject') return;
    this.timers.set(node, this.clock.setTimeout(() => void this.run(node), delay));
  }

  private async run(node: NodeState): Promise<void> {
    if (this.stopped || node.retired) return;
    const s = this.spec;
    const started = this.clock.now();
    if (s.check === 'none') {
      this.timers.delete(node);
      if (node.status !== 'DOWN') return;
      const failure = await probe(this.probeSpec(node, 'connection', RECOVERY_TIMEOUT_MS), this.stopping.signal);
      if (this.stopped) return;
      this.report(node, failure);
      if (node.status === 'DOWN') this.schedule(node, RECOVERY_INTERVAL_MS);
      return;
    }
    const failure = await probe(this.probeSpec(node, s.check, s.checkTimeoutMs), this.stopping.signal);
    if (this.stopped) return;
    if (failure) this.log.debug({ node: node.id, failure }, 'health check failed');
    this.report(node, failure);
    // The interval runs from the start of one probe to the start of the next.
    this.schedule(node, Math.max(0, s.checkIntervalMs - (this.clock.now() - started)));
  }

  private probeSpec(node: NodeState, type: ProbeSpec['type'], timeoutMs: number): ProbeSpec {
    return {
      // A udp node is checked over TCP or HTTP on its udp_check_port.
      type, host: node.spec.host, port: this.spec.protocol === 'udp' ? this.spec.udpCheckPort : node.spec.port, timeoutMs,
      path: this.spec.checkPath, body: this.spec.checkBody, proxyProtocol: this.spec.proxyProtocol,
      owner: { nodebalancerId: this.spec.nodebalancerId, configId: this.spec.id },
    };
  }
}
