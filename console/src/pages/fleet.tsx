import { useState } from 'preact/hooks';
import { call, isAdmin } from '../api.js';
import { hostRow, type HostRow } from '../fleet-hosts.js';
import { usePoll } from '../router.js';
import { ErrorBox, Link, PageTitle, Status, useAccess, when } from '../ui.js';

interface Member { id: string; region: string; connected: boolean; state?: string; members?: number; appliedVersion?: number | string | null; lastError?: string | null; lastSeen?: number | string | null }

/** The fleet endpoints have spelled these fields more than one way; read any of them. */
function member(raw: Record<string, any>): Member {
  return {
    id: raw.id, region: raw.region, connected: raw.connected === true,
    // Agents only: their host state and how many members they run (data planes have neither).
    state: typeof raw.state === 'string' ? raw.state : undefined,
    members: Array.isArray(raw.members) ? raw.members.length : undefined,
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
  const hosts = rows.some((m) => m.state !== undefined);
  return (
    <section aria-labelledby={`fleet-${title}`}>
      <h2 id={`fleet-${title}`}>{title}</h2>
      {rows.length === 0 ? <p>None joined yet.</p> : (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">{title}</caption>
            <thead><tr><th scope="col">Id</th><th scope="col">Region</th><th scope="col">Connected</th>{hosts ? <><th scope="col">State</th><th scope="col">Members</th></> : null}<th scope="col">Applied version</th><th scope="col">Last seen</th><th scope="col">Last error</th></tr></thead>
            <tbody>
              {rows.map((m) => (
                <tr key={m.id}>
                  <th scope="row">{m.id}</th>
                  <td>{m.region}</td>
                  <td><Status value={m.connected ? 'connected' : 'disconnected'} /></td>
                  {hosts ? <><td><Status value={m.state ?? 'unknown'} /></td><td>{m.members ?? ''}</td></> : null}
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

/**
 * One agent host: its state (and drain), region, the members it runs and the newest events that
 * name it. Every value is rendered as text (labels are written by tenants).
 */
function HostSection({ h }: { h: HostRow }) {
  const head = `host-${h.id.replace(/[^A-Za-z0-9_-]/g, '_')}`;
  return (
    <section class="host" data-host={h.id} aria-labelledby={head}>
      <h3 id={head}>{h.id}</h3>
      <dl class="facts">
        <dt>State</dt>
        <dd data-host-state>
          <Status value={h.state || 'unknown'} />
          {h.draining ? <> <Status value="draining" /></> : null}
        </dd>
        {h.draining ? <><dt>Drain</dt><dd data-host-drain>{h.drain || 'in progress'}</dd></> : null}
        <dt>Region</dt><dd data-host-region>{h.region || 'any'}</dd>
        <dt>Last seen</dt><dd>{at(h.lastSeen)}</dd>
      </dl>
      {h.members.length === 0 ? <p data-host-members="0">No members on this host.</p> : (
        <div class="table-wrap">
          <table data-host-members={h.members.length}>
            <caption class="sr-only">Members on {h.id}</caption>
            <thead><tr><th scope="col">Database</th><th scope="col">Id</th><th scope="col">Member</th><th scope="col">Role</th><th scope="col">Node status</th></tr></thead>
            <tbody>
              {h.members.map((m) => (
                <tr key={`${m.databaseId}:${m.member}`} data-member={`${m.databaseId}:${m.member}`}>
                  <th scope="row">{m.databaseId === null ? m.label : <Link to={`/databases/${m.databaseId}`}>{m.label}</Link>}</th>
                  <td>{m.databaseId ?? ''}</td>
                  <td>{m.member === null ? '' : `node ${m.member}`}</td>
                  <td>{m.role}</td>
                  <td>{m.status ? <Status value={m.status} /> : 'not reported'}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
      <h4>Recent events</h4>
      {h.events.length === 0 ? <p>No recent event names this host.</p> : (
        <ul class="host-events">
          {h.events.map((e) => (
            <li key={e.id}>
              <span class="muted">{when(e.created)}</span> {e.action} <Status value={e.status || 'notification'} /> {e.entity}: {e.message}
            </li>
          ))}
        </ul>
      )}
    </section>
  );
}

export function FleetPage() {
  const access = useAccess();
  const [fleet, setFleet] = useState<{ dataplanes: Member[]; agents: Member[]; hosts: HostRow[] }>();
  const [err, setErr] = useState<unknown>();
  usePoll(async () => {
    if (!isAdmin(access)) return;
    try {
      const [d, a] = await Promise.all([call('GET', '/v4/fulcrum/dataplanes'), call('GET', '/v4/fulcrum/agents')]);
      setFleet({ dataplanes: d.data.map(member), agents: a.data.map(member), hosts: a.data.map(hostRow) });
      setErr(undefined);
    } catch (e) { setErr(e); }
  }, 5_000);
  if (!isAdmin(access)) return <><PageTitle>Fleet</PageTitle><p>The fleet is shown to unrestricted users only.</p></>;
  return (
    <>
      <PageTitle>Fleet</PageTitle>
      <ErrorBox error={err} />
      {fleet ? (
        <>
          <MemberTable title="Data planes" rows={fleet.dataplanes} />
          <MemberTable title="Agents" rows={fleet.agents} />
          <section aria-labelledby="fleet-hosts">
            <h2 id="fleet-hosts">Agent hosts</h2>
            <p>Each host's state, the database members it runs and the newest events that name it, refreshed every 5 seconds.</p>
            {fleet.hosts.length === 0 ? <p>None joined yet.</p> : fleet.hosts.map((h) => <HostSection key={h.id} h={h} />)}
          </section>
        </>
      ) : <p role="status">Loading…</p>}
    </>
  );
}
