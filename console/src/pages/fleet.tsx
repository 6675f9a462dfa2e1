import { useState } from 'preact/hooks';
import { call, isAdmin } from '../api.js';
import { usePoll } from '../router.js';
import { ErrorBox, PageTitle, Status, useAccess, when } from '../ui.js';

interface Member { id: string; region: string; connected: boolean; appliedVersion?: number | string | null; lastError?: string | null; lastSeen?: number | string | null }

/** The fleet endpoints have spelled these fields more than one way; read any of them. */
function member(raw: Record<string, any>): Member {
  return {
    id: raw.id, region: raw.region, connected: raw.connected === true,
    appliedVersion: raw.appliedVersion ?? raw.versionApplied ?? raw.applied_version ?? raw.version_applied ?? null,
    lastError: raw.lastError ?? raw.last_error ?? null,
    lastSeen: raw.lastSeen ?? raw.last_seen ?? null,
  };
}

function at(v: number | string | null | undefined): string {
  if (v === null || v === undefined) return '';
  return typeof v === 'number' ? new Date(v).toLocaleString() : when(v);
}

function MemberTable({ title, rows }: { title: string; rows: Member[] }) {
  return (
    <section aria-labelledby={`fleet-${title}`}>
      <h2 id={`fleet-${title}`}>{title}</h2>
      {rows.length === 0 ? <p>None joined yet.</p> : (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">{title}</caption>
            <thead><tr><th scope="col">Id</th><th scope="col">Region</th><th scope="col">Connected</th><th scope="col">Applied version</th><th scope="col">Last seen</th><th scope="col">Last error</th></tr></thead>
            <tbody>
              {rows.map((m) => (
                <tr key={m.id}>
                  <th scope="row">{m.id}</th>
                  <td>{m.region}</td>
                  <td><Status value={m.connected ? 'connected' : 'disconnected'} /></td>
                  <td>{m.appliedVersion ?? ''}</td>
                  <td>{at(m.lastSeen)}</td>
                  <td>{m.lastError ?? 'none'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

export function FleetPage() {
  const access = useAccess();
  const [fleet, setFleet] = useState<{ dataplanes: Member[]; agents: Member[] }>();
  const [err, setErr] = useState<unknown>();
  usePoll(async () => {
    if (!isAdmin(access)) return;
    try {
      const [d, a] = await Promise.all([call('GET', '/v4/fulcrum/dataplanes'), call('GET', '/v4/fulcrum/agents')]);
      setFleet({ dataplanes: d.data.map(member), agents: a.data.map(member) });
      setErr(undefined);
    } catch (e) { setErr(e); }
  }, 5_000);
  if (!isAdmin(access)) return <><PageTitle>Fleet</PageTitle><p>The fleet is shown to unrestricted users only.</p></>;
  return (
    <>
      <PageTitle>Fleet</PageTitle>
      <ErrorBox error={err} />
      {fleet ? <><MemberTable title="Data planes" rows={fleet.dataplanes} /><MemberTable title="Agents" rows={fleet.agents} /></> : <p role="status">Loading…</p>}
    </>
  );
}
