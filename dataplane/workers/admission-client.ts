import { hashString } from '../balancing/picker.js';
import type { SharedAdmission } from '../listeners/listener.js';
import type { ConfigRuntime } from '../runtime/config-runtime.js';
import type { AdmitAnswer, AdmitRequest } from './protocol.js';

/**
 * A worker's side of the shared admission (docs/dataplane.md, "Workers"): one IPC round trip to
 * the primary, only for throttled NodeBalancers and for clients `table` stickiness has not pinned
 * in this process yet. The answer's table entry is copied into the config's own table, where
 * the sessions find it.
 */
export class AdmissionClient implements SharedAdmission {
  private next = 0;
  private readonly waiting = new Map<number, { rt: ConfigRuntime; ip: string; resolve: (ok: boolean) => void }>();

  constructor(private readonly send: (m: AdmitRequest) => void) {}

  admit(rt: ConfigRuntime, ip: string, key: string): Promise<boolean> {
    const id = ++this.next;
    const table = rt.spec.stickiness === 'table';
    const node = table ? rt.propose(hashString(ip)) : undefined;
    return new Promise((resolve) => {
      this.waiting.set(id, { rt, ip, resolve });
      this.send({ t: 'admit', id, nb: rt.spec.nodebalancerId, limit: rt.throttle.limit, ip, key, config: node === undefined ? undefined : rt.spec.id, node });
    });
  }

  answer(m: AdmitAnswer): void {
    const w = this.waiting.get(m.id);
    if (w === undefined) return;
    this.waiting.delete(m.id);
    if (m.ok && m.node !== undefined && m.added !== undefined) w.rt.pin(w.ip, m.node, m.added);
    w.resolve(m.ok);
  }
}
