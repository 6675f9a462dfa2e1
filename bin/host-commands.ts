/**
 * The `fulcrum host ...` commands (docs/multi-host.md, "A lost host" and "Draining a host"): run on
 * the control plane's host, they work on its store like `join-token create`.
 */
import { parseFlags } from '../lib/args.js';
import { hostLostFlags } from './flags.js';
import { required, withStore } from './commands.js';

/**
 * `fulcrum host lost ID` (POST /v4/fulcrum/agents/ID/lost; docs/multi-host.md, "A lost host"):
 * fenced in the store, its certificates revoked, so every replica refuses it at its next re-check
 * (5 s); the lease holder re-places its members on its next round.
 */
export async function runHostLost(argv: string[]): Promise<void> {
  const { id, f, stateDir } = hostArgs(argv, 'lost');
  const { FleetCa } = await import('../control-plane/domain/fleet/ca.js');
  const { FleetService } = await import('../control-plane/domain/fleet/fleet-service.js');
  const { RegionCatalogue } = await import('../control-plane/domain/regions.js');
  const { EventService } = await import('../control-plane/domain/events/event-service.js');
  const { HostHealing } = await import('../control-plane/domain/databases/host-healing.js');
  const { systemClock } = await import('../lib/clock.js');
  const { createLogger } = await import('../lib/logger.js');
  await withStore(stateDir, f, async (store) => {
    const fleet = new FleetService({ repo: store.fleet, ca: FleetCa.open(stateDir), regions: new RegionCatalogue(), clock: systemClock, bootstrapPort: () => 0 });
    const healing = new HostHealing({
      repo: store.databases, events: new EventService(store.events, systemClock), clock: systemClock, logger: createLogger('fulcrum-host', { level: 'warn', destination: 2 }),
      revoke: (h) => fleet.revoke('agent', h), removed: async (h) => (await fleet.removedAmong('agent', [h])).length > 0,
    });
    const v = await healing.declareLost(id, 'operator', 'declared lost by an operator');
    process.stdout.write(`agent ${v.id} is ${v.state}\n`);
  });
}

/** `fulcrum host lost|drain|undrain ID`: the id is the one word that is not an option (`ID --state DIR` or `--state DIR ID`). */
function hostArgs(argv: string[], verb: string): { id: string; f: ReturnType<typeof parseFlags>; stateDir: string } {
  const at = argv.findIndex((a, i) => !a.startsWith('--') && (i === 0 || !argv[i - 1]!.startsWith('--') || argv[i - 1]!.includes('=')));
  const id = at === -1 ? undefined : argv[at];
  const f = parseFlags(argv.filter((_, i) => i !== at), hostLostFlags);
  const stateDir = required(f.state as string | undefined, 'state');
  if (!id) throw new Error(`usage: fulcrum host ${verb} --state DIR ID`);
  return { id, f, stateDir };
}

/**
 * `fulcrum host drain ID` / `host undrain ID` (POST /v4/fulcrum/agents/ID/drain|undrain;
 * docs/multi-host.md, "Draining a host"): marked in the store, refused when a member there would
 * have nowhere to go; the lease holder moves the members on its next rounds.
 */
export async function runHostDrain(argv: string[], verb: 'drain' | 'undrain'): Promise<void> {
  const { id, f, stateDir } = hostArgs(argv, verb);
  const { EventService } = await import('../control-plane/domain/events/event-service.js');
  const { HostHealing } = await import('../control-plane/domain/databases/host-healing.js');
  const { HostDrain } = await import('../control-plane/domain/databases/host-drain.js');
  const { Switchover } = await import('../control-plane/domain/databases/switchover.js');
  const { SingleMove } = await import('../control-plane/domain/databases/single-move.js');
  const { systemClock } = await import('../lib/clock.js');
  const { createLogger } = await import('../lib/logger.js');
  await withStore(stateDir, f, async (store) => {
    const logger = createLogger('fulcrum-host', { level: 'warn', destination: 2 });
    const events = new EventService(store.events, systemClock);
    const repo = store.databases;
    // Only the drain's own mark and events are written here: nothing moves in this process.
    const healing = new HostHealing({ repo, events, clock: systemClock, logger, revoke: async () => undefined, removed: async () => false });
    const switchover = new Switchover({ repo, events, clock: systemClock, logger, onChange: () => undefined });
    const move = new SingleMove({ repo, events, clock: systemClock, logger, onChange: () => undefined });
    const drain = new HostDrain({ repo, events, clock: systemClock, logger, healing, switchover, move });
    const v = verb === 'drain' ? await drain.drain(id) : await drain.undrain(id);
    process.stdout.write(`agent ${v.id} is ${v.draining ? 'draining' : 'not draining'}; ${v.membersLeft} member(s) on it\n`);
  });
}
