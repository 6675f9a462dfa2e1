import { PeerRefused, type FleetService, type HostRole } from '../domain/fleet/fleet-service.js';

/** One open stream of a data plane or agent on this replica, as a push server registers it. */
export interface OpenStream {
  role: HostRole;
  id: string;
  /** The serial of the certificate the stream was opened with; '' with --insecure-grpc. */
  serial: string;
  /** Ends the stream with PERMISSION_DENIED and the reason. */
  end(reason: PeerRefused): void;
}

/**
 * Every host stream this replica holds (config, telemetry, agent), so that a removed host's are
 * closed wherever they are (docs/security/grpc.md, "Revocation"): at once when the removal is
 * made here or heard from another replica, and by the periodic re-check of their certificates,
 * which catches a removal whose notification was lost.
 */
export class PeerStreams {
  private readonly open = new Set<OpenStream>();

  /** Registers a stream; the answer unregisters it (when it ends). */
  add(s: OpenStream): () => void {
    this.open.add(s);
    return () => void this.open.delete(s);
  }

  /** Ends every stream of that host on this replica; returns how many. */
  kickHost(role: HostRole, id: string): number {
    let n = 0;
    for (const s of [...this.open]) {
      if (s.role !== role || s.id !== id) continue;
      this.open.delete(s);
      s.end(new PeerRefused(`${role === 'dataplane' ? 'data plane' : 'agent'} ${id} was removed`));
      n++;
    }
    return n;
  }

  /** Ends the streams whose certificate the fleet no longer admits; returns how many. */
  async recheck(fleet: Pick<FleetService, 'refusedAmong'>): Promise<number> {
    const certified = [...this.open].filter((s) => s.serial !== '');
    if (certified.length === 0) return 0;
    const refused = await fleet.refusedAmong([...new Set(certified.map((s) => s.serial))]);
    let n = 0;
    for (const s of certified) {
      if (!refused.has(s.serial) || !this.open.delete(s)) continue;
      s.end(new PeerRefused(`the certificate of ${s.role} ${s.id} is no longer valid`));
      n++;
    }
    return n;
  }

  get size(): number {
    return this.open.size;
  }
}
