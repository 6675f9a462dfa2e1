import { ADMIN_GRANTS_VERSION } from '../mysql/accounts.js';
import { randomBytes, createHash } from 'node:crypto';
import { existsSync, readFileSync } from 'node:fs';
import { mkdir, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { DesiredDatabase__Output } from '../../proto/gen/fulcrum/v1/DesiredDatabase.js';

/**
 * What the agent remembers about one database between restarts, in
 * `<stateDir>/databases/<id>/state.json`. Secrets here are the agent's own (root@localhost,
 * replication); linroot's password comes from the desired state.
 */
export interface DbState {
  id: number;
  adminPassword: string;
  replPassword: string;
  /** Node addresses, index 0 = node 1. */
  addresses: string[];
  /** 1-based index of the node that is primary. */
  primary: number;
  /** A spread cluster: the highest control-plane term followed (older ones are refused). */
  term?: number;
  /**
   * A spread cluster's local primary fenced for a planned switchover at this term (FenceOp): kept
   * read-only until the control plane names another member primary (the fence ends) or says the
   * switchover of this term was abandoned (it serves again); see Cluster.followFence.
   * On a 1-node database: fenced to move to another host (a drain): read-only until the control
   * plane says that move was abandoned (fence_lifted_term, followMoveFence below), and its objects in the store are kept when it is
   * then removed here (they are the new host's now).
   */
  fencedTerm?: number;
  /** Reached `active` once: from then on, missing nodes are healed instead of provisioned. */
  provisioned: boolean;
  /** The binary or image the nodes run (a different desired one is a pending patch). */
  running: { binary?: string; image?: string; version: string };
  /** Key of the allow_list + password last applied to the accounts. */
  accountsKey: string;
  /** Nodes that were primary before a failover and must be rebuilt before they rejoin. */
  rebuild: number[];
  /**
   * Members of a semi_synch spread cluster being seeded here: each acknowledges no semi-sync write
   * (rpl_semi_sync_slave_enabled=OFF) until it has applied `until`, the primary's gtid_binlog_state
   * when its seeding began (seed-ack.ts).
   */
  seeding?: { node: number; until: string }[];
  /** Why a member could not be seeded, as last reported in a failed event (once per reason, not per retry; rejoin.ts). */
  unseeded?: string;
  /**
   * An old primary with transactions the new primary lacks (docs/agent.md §7): its binlog events
   * after `after` (the new primary's position) are saved before its rebuild wipes them.
   */
  errant?: { node: number; gtids: string[]; after: string };
  suspended: boolean;
  nextBackupId: number;
  /** Hidden base backups of the binlog archive count separately (agent/binlog). */
  nextBaseId?: number;
  /**
   * The binlog archive's next segment number. Never reused: once retention has dropped every
   * segment, numbering from the newest left would give an object name in the store new contents.
   */
  nextSegmentSeq?: number;
  /** UTC day (YYYY-MM-DD) of the last auto backup; the scheduler's memory across restarts. */
  lastAutoBackupDay?: string;
  error?: string;
  /**
   * Set while a restore is replacing the data (after its safety copy was stored): an agent that
   * starts and finds it loads the safety copy back before anything else touches the database.
   */
  restoreInProgress?: { backupId: number; startedMs: number };
  /** A fork's starting point: the source's backup it was built from and how it was loaded. */
  forkBase?: { backupId: number; kind: 'physical' | 'logical' };
  /**
   * Set (and saved) before a fork's nodes get any of its source's data, cleared when the fork is
   * provisioned: a provisioning that finds it starts the nodes over from empty data directories.
   */
  forkSeeding?: boolean;
  /** Base64 AES-256 key for this database's encrypted backups (state.json is mode 0600). */
  backupKey?: string;
  /** The last desired spec acted on (used when the control plane is away). */
  desired?: DesiredDatabase__Output;
}

/** Every node listens on its own loopback address, on the MySQL port. */
export const NODE_PORT = 3306;

export function databaseDir(stateDir: string, id: number): string {
  return join(stateDir, 'databases', String(id));
}

export function newDbState(id: number): DbState {
  const secret = () => randomBytes(18).toString('base64url');
  return {
    id,
    adminPassword: secret(),
    replPassword: secret(),
    addresses: [],
    primary: 1,
    provisioned: false,
    running: { version: '' },
    accountsKey: '',
    rebuild: [],
    suspended: false,
    nextBackupId: 1,
  };
}

export function loadDbState(stateDir: string, id: number): DbState | undefined {
  const file = join(databaseDir(stateDir, id), 'state.json');
  if (!existsSync(file)) return undefined;
  return { ...newDbState(id), ...(JSON.parse(readFileSync(file, 'utf8')) as DbState) };
}

export async function saveDbState(stateDir: string, s: DbState): Promise<void> {
  const dir = databaseDir(stateDir, s.id);
  await mkdir(dir, { recursive: true, mode: 0o700 });
  const file = join(dir, 'state.json');
  // The source's backup key a fork from the store was sent is the source's secret: it is kept
  // only while the fork is being built (a retry after a restart reads the store with it), and
  // the control plane stops sending it once the fork is provisioned.
  const kept = s.provisioned && s.desired?.forkSourceKey ? { ...s, desired: { ...s.desired, forkSourceKey: '' } } : s;
  await writeFile(`${file}.tmp`, JSON.stringify(kept, null, 1), { mode: 0o600 });
  await rename(`${file}.tmp`, file);
}

/** A digest of what the linroot accounts must look like, so a change is detected without SQL. */
export function accountsKey(allowList: string[], password: string): string {
  return createHash('sha256').update(JSON.stringify([[...allowList].sort(), password, ADMIN_GRANTS_VERSION])).digest('hex');
}

/** What a change of the state goes through: the controller, or the context an action runs with. */
export interface StateHolder {
  readonly state?: DbState;
  save(): Promise<void>;
}

/**
 * The one way a database's state changes (docs/agent.md, "One writer"): the change is applied to
 * the state the controller holds, then saved. A field given as undefined is cleared. Every other
 * module of the agent only reads the state; the lint rule agent/no-state-write keeps it so.
 */
export async function updateState(db: StateHolder, change: Partial<DbState>): Promise<void> {
  applyState(db, change);
  await db.save();
}

/** `updateState` without the save, for a change a later save of the caller's persists. */
export function applyState(db: Pick<StateHolder, 'state'>, change: Partial<DbState>): void {
  if (!db.state) throw new Error('the database was deleted');
  Object.assign(db.state, change);
}

/**
 * A 1-node database fenced to move at `s.fencedTerm` follows a desired state of `term`: the fence
 * is lifted ('lifted', `s.fencedTerm` cleared) only on the control plane's explicit word that this
 * very move was abandoned (DesiredDatabase.fence_lifted_term, the fence's own term, with a higher
 * term). A higher term alone keeps it ('kept'): the store may already hold the fence's position as
 * the end of a rebuild on another host, and a write here past it would be a second, diverging copy
 * of the database (docs/multi-host.md, "The move's fence"). 'none': no fence, or no higher term.
 * Asked only for a database still sent here with its member on this agent (it stays on this host).
 */
export function followMoveFence(s: DbState, term: number, fenceLiftedTerm: number): 'lifted' | 'kept' | 'none' {
  if (s.fencedTerm === undefined || term <= s.fencedTerm) return 'none';
  if (fenceLiftedTerm !== s.fencedTerm) return 'kept';
  s.fencedTerm = undefined;
  return 'lifted';
}
