import { describe, expect, it } from 'vitest';
import { FAILOVER_AFTER, FAILOVER_AFTER_UNREACHABLE, markedSeeding, observedStatus, plan, type DbObs, type NodeObs } from '../../../agent/database/plan.js';

const node = (index: number, over: Partial<NodeObs> = {}): NodeObs => ({
  index, state: 'running', specCurrent: true, reachable: true, readOnly: index !== 1, replicating: index !== 1, ...over,
});
const obs = (over: Partial<DbObs> = {}): DbObs => ({
  known: true, provisioned: true, clusterSize: 3, primary: 1, nodes: [node(1), node(2), node(3)], rebuild: [],
  accountsCurrent: true, proxiesCurrent: true, suspended: false, patchPending: false, patchRequested: false,
  windowOpen: false, primaryDownCount: 0, ...over,
});
const running3 = { clusterSize: 3, state: 'running' as const };

describe('plan', () => {
  it('sets dynamic engine_config variables after any restart, before accounts and proxies', () => {
    expect(plan(running3, obs({ variablesCurrent: true }))).toEqual([]);
    expect(plan(running3, obs({ variablesCurrent: false, accountsCurrent: false }))).toEqual([{ kind: 'sync-variables' }, { kind: 'sync-accounts' }]);
    expect(plan(running3, obs({ variablesCurrent: false, nodes: [node(1), node(2, { specCurrent: false }), node(3)] }))[0]).toEqual({ kind: 'rolling', reason: 'resize' });
  });
  it('does nothing for a healthy cluster', () => {
    expect(plan(running3, obs())).toEqual([]);
  });
  it('provisions an unknown or unfinished database', () => {
    expect(plan(running3, obs({ known: false, nodes: [] }))).toEqual([{ kind: 'provision' }]);
    expect(plan(running3, obs({ provisioned: false }))).toEqual([{ kind: 'provision' }]);
  });
  it('deletes a known database that is no longer desired, and nothing else', () => {
    expect(plan(undefined, obs())).toEqual([{ kind: 'delete' }]);
    expect(plan(undefined, obs({ known: false }))).toEqual([]);
  });
  it('suspends running nodes and resumes a suspended database', () => {
    expect(plan({ clusterSize: 3, state: 'suspended' }, obs())).toEqual([{ kind: 'suspend' }]);
    const stopped = obs({ suspended: true, nodes: [1, 2, 3].map((i) => node(i, { state: 'stopped', reachable: false })) });
    expect(plan({ clusterSize: 3, state: 'suspended' }, stopped)).toEqual([]);
    expect(plan(running3, stopped)).toEqual([{ kind: 'resume' }]);
  });
  it('fails over only after the primary was seen down several times', () => {
    const down = (n: number) => obs({ nodes: [node(1, { state: 'stopped', reachable: false }), node(2), node(3)], primaryDownCount: n });
    expect(plan(running3, down(1))).toEqual([]);
    expect(plan(running3, down(FAILOVER_AFTER))).toEqual([{ kind: 'failover' }]);
  });
  it('waits longer when the primary process runs but does not answer', () => {
    const hung = (n: number) => obs({ nodes: [node(1, { reachable: false }), node(2), node(3)], primaryDownCount: n });
    expect(plan(running3, hung(FAILOVER_AFTER))).toEqual([]);
    expect(plan(running3, hung(FAILOVER_AFTER_UNREACHABLE))).toEqual([{ kind: 'failover' }]);
  });
  it('restarts the primary of a single node, or when no replica can take over', () => {
    const one = obs({ clusterSize: 1, nodes: [node(1, { state: 'stopped', reachable: false })], primaryDownCount: 5 });
    expect(plan({ clusterSize: 1, state: 'running' }, one)).toEqual([{ kind: 'restart-primary' }]);
    const allDown = obs({ nodes: [1, 2, 3].map((i) => node(i, { state: 'stopped', reachable: false })), primaryDownCount: 5 });
    expect(plan(running3, allDown)).toEqual([{ kind: 'restart-primary' }]);
  });
  it('promotes a primary that came back read-only and rejoins broken replicas', () => {
    const o = obs({ nodes: [node(1, { readOnly: true }), node(2, { replicating: false }), node(3, { state: 'stopped', reachable: false })] });
    expect(plan(running3, o)).toEqual([
      { kind: 'promote-primary' },
      { kind: 'rejoin', index: 2, rebuild: false },
      { kind: 'rejoin', index: 3, rebuild: false },
    ]);
  });
  it('rebuilds old primaries and missing nodes', () => {
    const o = obs({ primary: 2, rebuild: [1], nodes: [node(1, { replicating: false }), node(2, { readOnly: false, replicating: false }), node(3, { state: 'missing' })] });
    expect(plan(running3, o)).toEqual([{ kind: 'rejoin', index: 1, rebuild: true }, { kind: 'rejoin', index: 3, rebuild: true }]);
  });
  it('rolls a resize, patches only in the window or on request, then syncs accounts and proxies', () => {
    expect(plan(running3, obs({ nodes: [node(1), node(2, { specCurrent: false }), node(3)] }))).toEqual([{ kind: 'rolling', reason: 'resize' }]);
    expect(plan(running3, obs({ patchPending: true }))).toEqual([]);
    expect(plan(running3, obs({ patchPending: true, windowOpen: true }))).toEqual([{ kind: 'rolling', reason: 'patch' }]);
    expect(plan(running3, obs({ patchRequested: true }))).toEqual([{ kind: 'rolling', reason: 'patch' }]);
    expect(plan(running3, obs({ accountsCurrent: false, proxiesCurrent: false }))).toEqual([{ kind: 'sync-accounts' }, { kind: 'sync-proxies' }]);
  });
  it('scales a healthy cluster to the desired size before any rolling restart, and heals first', () => {
    const one = obs({ clusterSize: 1, nodes: [node(1)] });
    expect(plan(running3, one)).toEqual([{ kind: 'scale', to: 3 }]);
    expect(plan(running3, obs({ clusterSize: 1, nodes: [node(1, { specCurrent: false })] }))).toEqual([{ kind: 'scale', to: 3 }]);
    const single = { clusterSize: 1, state: 'running' as const };
    expect(plan(single, obs({ nodes: [1, 2, 3].map((i) => node(i, { specCurrent: false })) }))).toEqual([{ kind: 'scale', to: 1 }]);
    // A broken replica is healed before the cluster shrinks (a switchover needs it replicating).
    expect(plan(single, obs({ nodes: [node(1), node(2, { replicating: false }), node(3)] }))).toEqual([{ kind: 'rejoin', index: 2, rebuild: false }]);
    expect(plan({ clusterSize: 1, state: 'running' }, one)).toEqual([]);
    // Sizes other than 1 and 3 are never acted on (the control plane refuses them).
    expect(plan({ clusterSize: 2, state: 'running' }, obs())).toEqual([]);
  });
});

describe('observedStatus', () => {
  const base = { provisioned: true, suspended: false, desiredSuspended: false, healthy: true, primaryOk: true };
  it('maps work in progress to the API vocabulary', () => {
    expect(observedStatus({ ...base, busy: 'provision', provisioned: false })).toBe('provisioning');
    expect(observedStatus({ ...base, busy: 'rolling' })).toBe('updating');
    expect(observedStatus({ ...base, busy: 'scale' })).toBe('resizing');
    expect(observedStatus({ ...base, busy: 'snapshot' })).toBe('backing_up');
    expect(observedStatus({ ...base, busy: 'restore' })).toBe('restoring');
    expect(observedStatus({ ...base, busy: 'failover' })).toBe('degraded');
  });
  it('derives health otherwise', () => {
    expect(observedStatus(base)).toBe('active');
    expect(observedStatus({ ...base, healthy: false })).toBe('degraded');
    expect(observedStatus({ ...base, healthy: false, primaryOk: false })).toBe('failed');
    expect(observedStatus({ ...base, healthy: false, primaryOk: false, canFailover: true })).toBe('degraded');
    expect(observedStatus({ ...base, provisioned: false, error: 'x' })).toBe('failed');
    expect(observedStatus({ ...base, suspended: true, desiredSuspended: true })).toBe('suspended');
  });
});

describe('plan of a cluster spread over agents (only local members are seen)', () => {
  const spread = (local: number[], over: Partial<DbObs> = {}, primaryKnown = true): DbObs => obs({
    nodes: local.map((i) => node(i)), spread: { local, primaryKnown, semiSyncWanted: true }, ...over,
  });
  it('never fails over on its own: a local primary that is down is restarted', () => {
    const o = spread([1], { nodes: [node(1, { state: 'stopped', reachable: false })], primaryDownCount: 9 });
    expect(plan(running3, o)).toEqual([{ kind: 'restart-primary' }]);
  });
  it('turns on the semi-sync master side of a local primary, and promotes one named while read-only', () => {
    expect(plan(running3, spread([1], { nodes: [node(1, { semiSyncMaster: false })] }))).toEqual([{ kind: 'promote-primary' }]);
    expect(plan(running3, spread([1], { nodes: [node(1, { semiSyncMaster: true })] }))).toEqual([]);
    expect(plan(running3, spread([2], { primary: 2, nodes: [node(2, { readOnly: true, replicating: false, semiSyncMaster: false })] }))[0]).toEqual({ kind: 'promote-primary' });
  });
  it('makes a local member that is still writable (an old primary) or not replicating rejoin the named primary', () => {
    expect(plan(running3, spread([1], { primary: 2, nodes: [node(1, { readOnly: false, replicating: false })] }))).toEqual([{ kind: 'rejoin', index: 1, rebuild: false }]);
    expect(plan(running3, spread([3], { nodes: [node(3, { replicating: false })] }))).toEqual([{ kind: 'rejoin', index: 3, rebuild: false }]);
    expect(plan(running3, spread([3], { nodes: [] }))).toEqual([{ kind: 'rejoin', index: 3, rebuild: true }]);
    expect(plan(running3, spread([3]))).toEqual([]);
  });
  it('keeps a 1-node database fenced to move read-only: no promotion, account sync or restart into writes; a restart of a dead node and proxies still', () => {
    const one = { clusterSize: 1, state: 'running' as const };
    const fenced = (over: Partial<DbObs> = {}) => obs({ clusterSize: 1, nodes: [node(1, { readOnly: true })], movingOut: true, ...over });
    expect(plan(one, fenced())).toEqual([]);
    expect(plan(one, fenced({ accountsCurrent: false, variablesCurrent: false, patchRequested: true }))).toEqual([]);
    expect(plan(one, fenced({ nodes: [node(1, { readOnly: true, specCurrent: false })] }))).toEqual([]);
    expect(plan(one, fenced({ proxiesCurrent: false }))).toEqual([{ kind: 'sync-proxies' }]);
    expect(plan(one, fenced({ nodes: [node(1, { state: 'stopped', reachable: false })] }))).toEqual([{ kind: 'restart-primary' }]);
    // The move abandoned (the fence lifted): it serves writes again.
    expect(plan(one, fenced({ movingOut: false }))).toEqual([{ kind: 'promote-primary' }]);
  });
  it('keeps a primary fenced for a planned switchover read-only, and promotes it again once the fence is lifted', () => {
    const fenced = (on: boolean) => obs({ nodes: [node(1, { readOnly: true, semiSyncMaster: true })], spread: { local: [1], primaryKnown: true, semiSyncWanted: true, fenced: on } });
    expect(plan(running3, fenced(true))).toEqual([]);
    expect(plan(running3, fenced(false))).toEqual([{ kind: 'promote-primary' }]);
    // Nor are accounts synced on it while fenced (root's writes would be past the fenced position).
    const accounts = (on: boolean) => obs({ nodes: [node(1, { readOnly: on, semiSyncMaster: true })], accountsCurrent: false, spread: { local: [1], primaryKnown: true, semiSyncWanted: true, fenced: on } });
    expect(plan(running3, accounts(true))).toEqual([]);
    expect(plan(running3, accounts(false))).toEqual([{ kind: 'sync-accounts' }]);
    // Once another member is named, the fenced old primary rejoins it as any old primary does.
    const named = obs({ primary: 2, nodes: [node(1, { readOnly: true, replicating: false })], spread: { local: [1], primaryKnown: true, semiSyncWanted: true, fenced: false } });
    expect(plan(running3, named)).toEqual([{ kind: 'rejoin', index: 1, rebuild: false }]);
  });
  it('turns a seeding member acknowledging only once it replicates and has applied the primary\'s position at its seeding', () => {
    const seeding = (n: NodeObs, entries = [{ node: 3, until: '0-1-40,0-2-12' }], local = [3]) =>
      obs({ nodes: [n], spread: { local, primaryKnown: true, semiSyncWanted: true, seeding: entries } });
    // Behind in the domain, or at the sequence number but not replicating: it stays silent.
    expect(plan(running3, seeding(node(3, { gtid: '0-2-39' })))).toEqual([]);
    expect(plan(running3, seeding(node(3)))).toEqual([]);
    expect(plan(running3, seeding(node(3, { gtid: '0-2-40', replicating: false })))[0]).toEqual({ kind: 'rejoin', index: 3, rebuild: false });
    expect(plan(running3, seeding(node(3, { gtid: '0-2-40', reachable: false })))).toEqual([{ kind: 'rejoin', index: 3, rebuild: false }]);
    // Caught up (gtid_current_pos names the last server; the sequence number counts).
    expect(plan(running3, seeding(node(3, { gtid: '0-2-40' })))).toEqual([{ kind: 'acknowledge', index: 3 }]);
    expect(plan(running3, seeding(node(3, { gtid: '0-1-41' })))).toEqual([{ kind: 'acknowledge', index: 3 }]);
    // Named primary before it was seen caught up, or no longer run here: the entry is dropped.
    expect(plan(running3, obs({ primary: 3, nodes: [node(3, { readOnly: false, replicating: false, semiSyncMaster: true, gtid: '0-2-1' })], spread: { local: [3], primaryKnown: true, semiSyncWanted: true, seeding: [{ node: 3, until: '0-1-40' }] } })))
      .toEqual([{ kind: 'acknowledge', index: 3 }]);
    expect(plan(running3, seeding(node(2, { gtid: '0-1-1' }), [{ node: 3, until: '0-1-40' }], [2]))).toEqual([{ kind: 'acknowledge', index: 3 }]);
  });
  it('keeps a caught-up seeding member silent while the control plane still marks it seeding', () => {
    const marked = (n: NodeObs, m: number[] | undefined, primary = 1) =>
      obs({ primary, nodes: [n], spread: { local: [3], primaryKnown: true, semiSyncWanted: true, seeding: [{ node: 3, until: '0-1-40' }], ...(m ? { marked: m } : {}) } });
    const caught = node(3, { gtid: '0-1-40' });
    // Marked: nothing, however far it has applied; the mark cleared (or never sent): on.
    expect(plan(running3, marked(caught, [3]))).toEqual([]);
    expect(plan(running3, marked(node(3, { gtid: '0-1-99' }), [3]))).toEqual([]);
    expect(plan(running3, marked(caught, []))).toEqual([{ kind: 'acknowledge', index: 3 }]);
    expect(plan(running3, marked(caught, undefined))).toEqual([{ kind: 'acknowledge', index: 3 }]);
    // A mark on another member holds only that one.
    expect(plan(running3, marked(caught, [2]))).toEqual([{ kind: 'acknowledge', index: 3 }]);
    // Cleared but behind: it waits for its own position, as before the mark.
    expect(plan(running3, marked(node(3, { gtid: '0-1-39' }), []))).toEqual([]);
    // Named primary while marked: the entry is dropped all the same (a primary acknowledges nothing).
    expect(plan(running3, marked(node(3, { readOnly: false, replicating: false, semiSyncMaster: true, gtid: '0-1-40' }), [3], 3))).toEqual([{ kind: 'acknowledge', index: 3 }]);
  });
  it('silences a marked member that replicates with no seeding entry, before anything else of its own', () => {
    const held = (n: NodeObs, over: Record<string, unknown> = {}) =>
      obs({ nodes: [n], spread: { local: [3], primaryKnown: true, semiSyncWanted: true, marked: [3], ...over } });
    expect(plan(running3, held(node(3)))).toEqual([{ kind: 'hold-acks', index: 3 }]);
    // Its entry exists, it is unmarked, not replicating (its rejoin seeds it silent), the
    // primary, the primary's address unknown, or no semi-sync: nothing to silence.
    expect(plan(running3, held(node(3), { seeding: [{ node: 3, until: '0-1-40' }] }))).toEqual([]);
    expect(plan(running3, held(node(3), { marked: [] }))).toEqual([]);
    expect(plan(running3, held(node(3, { replicating: false })))).toEqual([{ kind: 'rejoin', index: 3, rebuild: false }]);
    expect(plan(running3, held(node(3, { state: 'missing' })))).toEqual([{ kind: 'rejoin', index: 3, rebuild: true }]);
    expect(plan(running3, held(node(3), { primaryKnown: false }))).toEqual([]);
    expect(plan(running3, held(node(3), { semiSyncWanted: false }))).toEqual([]);
    expect(plan(running3, obs({ primary: 3, nodes: [node(3, { readOnly: false, replicating: false, semiSyncMaster: true })], spread: { local: [3], primaryKnown: true, semiSyncWanted: true, marked: [3] } }))).toEqual([]);
  });
  it('reads the control plane\'s seeding mark of the local members only', () => {
    const member = (index: number, local: boolean, seeding?: boolean) => ({ index, local, ...(seeding === undefined ? {} : { seeding }) });
    expect(markedSeeding({ members: [member(1, false, true), member(2, true, false), member(3, true, true)] })).toEqual([3]);
    // An older control plane sends no mark; a desired state of a database not spread has no members.
    expect(markedSeeding({ members: [member(1, false), member(3, true)] })).toEqual([]);
    expect(markedSeeding(undefined)).toEqual([]);
  });
  it('waits while the primary\'s address is not known, and leaves accounts to the primary\'s agent', () => {
    expect(plan(running3, spread([3], { nodes: [node(3, { replicating: false })], accountsCurrent: false }, false))).toEqual([]);
    expect(plan(running3, spread([1], { nodes: [node(1, { semiSyncMaster: true })], accountsCurrent: false }))).toEqual([{ kind: 'sync-accounts' }]);
  });
});
