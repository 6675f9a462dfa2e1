import { useState } from 'preact/hooks';
import { all, call, canWrite } from '../api.js';
import { track } from '../activity.js';
import { usePoll } from '../router.js';
import { ConfirmButton, ErrorBox, Field, Link, PageTitle, Status, go, toast, useAccess, when } from '../ui.js';
import { DB_BASE, parseAllowList } from './databases.js';

function Credentials({ id }: { id: number }) {
  const [creds, setCreds] = useState<{ username: string; password: string }>();
  const [err, setErr] = useState<unknown>();
  return (
    <section aria-labelledby="creds">
      <h2 id="creds">Credentials</h2>
      {creds ? (
        <dl class="facts">
          <dt>Username</dt><dd data-cred="username">{creds.username}</dd>
          <dt>Password</dt><dd data-cred="password" class="secret">{creds.password}</dd>
        </dl>
      ) : <p>Hidden.</p>}
      <button type="button" aria-expanded={creds ? 'true' : 'false'} onClick={async () => {
        if (creds) return setCreds(undefined);
        try { setCreds(await call('GET', `${DB_BASE}/${id}/credentials`)); setErr(undefined); } catch (e) { setErr(e); }
      }}>{creds ? 'Hide credentials' : 'Reveal credentials'}</button>
      <ErrorBox error={err} />
    </section>
  );
}

async function downloadCa(id: number, label: string): Promise<void> {
  const { ca_certificate } = await call<{ ca_certificate: string }>('GET', `${DB_BASE}/${id}/ssl`);
  const url = URL.createObjectURL(new Blob([atob(ca_certificate)], { type: 'application/x-pem-file' }));
  const a = document.createElement('a');
  a.href = url;
  a.download = `${label}-ca-certificate.crt`;
  a.click();
  setTimeout(() => URL.revokeObjectURL(url), 10_000);
}

function AllowList({ db, editable, onSaved }: { db: any; editable: boolean; onSaved: () => void }) {
  const [text, setText] = useState((db.allow_list as string[]).join('\n'));
  const [err, setErr] = useState<unknown>();
  return (
    <section aria-labelledby="allow">
      <h2 id="allow">Allow list</h2>
      {editable ? (
        <form onSubmit={async (e) => {
          e.preventDefault();
          try { await call('PUT', `${DB_BASE}/${db.id}`, { allow_list: parseAllowList(text) }); setErr(undefined); toast('Allow list saved'); onSaved(); } catch (x) { setErr(x); }
        }}>
          <Field id="allow-list" label="Addresses and ranges allowed to connect (one per line)">
            <textarea id="allow-list" rows={4} value={text} onInput={(e) => setText(e.currentTarget.value)} />
          </Field>
          <ErrorBox error={err} />
          <button type="submit">Save allow list</button>
        </form>
      ) : <ul>{(db.allow_list as string[]).map((a) => <li key={a}>{a}</li>)}</ul>}
    </section>
  );
}

function Backups({ db, editable, onChanged }: { db: any; editable: boolean; onChanged: () => void }) {
  const [rows, setRows] = useState<any[]>();
  const [label, setLabel] = useState('');
  const [err, setErr] = useState<unknown>();
  const provisioning = db.status === 'provisioning';
  usePoll(async () => {
    // Listing backups needs read_write, as on the real service (docs/databases.md).
    // ...and is refused while the database is still provisioning.
    if (!editable || provisioning) return;
    try { setRows(await all(`${DB_BASE}/${db.id}/backups`)); } catch (e) { setErr(e); }
  }, 5_000, [db.id, editable, provisioning]);
  if (!editable) return <section aria-labelledby="backups"><h2 id="backups">Backups</h2><p>Listing backups needs a read-write token.</p></section>;
  return (
    <section aria-labelledby="backups">
      <h2 id="backups">Backups</h2>
      <form class="inline-form" onSubmit={async (e) => {
        e.preventDefault();
        try {
          await call('POST', `${DB_BASE}/${db.id}/backups`, { label });
          track('database', db.id, 'database_backup_create', `${db.label} snapshot ${label}`);
          setLabel(''); setErr(undefined); onChanged();
        } catch (x) { setErr(x); }
      }}>
        <label for="snap-label">Snapshot label</label>
        <input id="snap-label" aria-describedby="snap-hint" value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
        <small id="snap-hint">Letters, digits and underscores, up to 30.</small>
        <button type="submit">Take snapshot</button>
      </form>
      <ErrorBox error={err} />
      {provisioning ? <p>Backups are listed once the database is provisioned.</p> : rows === undefined ? <p role="status">Loading backups…</p> : rows.length === 0 ? <p>No backups yet.</p> : (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">Backups</caption>
            <thead><tr><th scope="col">Label</th><th scope="col">Type</th><th scope="col">Created</th><th scope="col">Actions</th></tr></thead>
            <tbody>
              {rows.map((b) => (
                <tr key={b.id} data-backup={b.label}>
                  <th scope="row">{b.label}</th><td>{b.type}</td><td>{when(b.created)}</td>
                  <td><ConfirmButton label={`Restore ${b.label}`} question={`Restore ${db.label} from backup ${b.label}? Data written since then is lost.`}
                    confirm={`Restore from ${b.label}`} onConfirm={async () => {
                      await call('POST', `${DB_BASE}/${db.id}/backups/${b.id}/restore`);
                      track('database', db.id, 'database_backup_restore', `${db.label} from ${b.label}`);
                      onChanged();
                    }} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </section>
  );
}

function Maintenance({ db, editable, onChanged }: { db: any; editable: boolean; onChanged: () => void }) {
  const u = db.updates ?? {};
  const days = ['', 'Monday', 'Tuesday', 'Wednesday', 'Thursday', 'Friday', 'Saturday', 'Sunday'];
  const pending: any[] = Array.isArray(u.pending) ? u.pending : [];
  const [err, setErr] = useState<unknown>();
  return (
    <section aria-labelledby="maint">
      <h2 id="maint">Maintenance</h2>
      <p>Window: {u.frequency ?? 'weekly'}, {days[u.day_of_week] ?? '?'} at {String(u.hour_of_day ?? 0).padStart(2, '0')}:00 UTC for {u.duration ?? 3} hours.</p>
      <p>Pending patches: {pending.length === 0 ? 'none reported' : pending.map((p) => p.description ?? p.type ?? JSON.stringify(p)).join(', ')}.</p>
      {editable ? (
        <button type="button" onClick={async () => {
          try { await call('POST', `${DB_BASE}/${db.id}/patch`); track('database', db.id, 'database_update', db.label); setErr(undefined); onChanged(); } catch (e) { setErr(e); }
        }}>Apply patches now</button>
      ) : null}
      <ErrorBox error={err} />
    </section>
  );
}

export function DatabaseDetail({ id }: { id: number }) {
  const access = useAccess();
  const editable = canWrite(access, 'databases');
  const [db, setDb] = useState<any>();
  const [err, setErr] = useState<unknown>();
  const [tick, setTick] = useState(0);
  usePoll(async () => {
    try { setDb(await call('GET', `${DB_BASE}/${id}`)); setErr(undefined); } catch (e) { setErr(e); }
  }, 3_000, [id, tick]);
  const refresh = () => setTick(tick + 1);
  const action = (path: string, event: string) => async () => {
    try { await call('POST', `${DB_BASE}/${id}/${path}`); track('database', id, event, db.label); setErr(undefined); refresh(); } catch (e) { setErr(e); }
  };
  if (!db) return <><PageTitle>Database</PageTitle><ErrorBox error={err} />{err ? null : <p role="status">Loading…</p>}</>;
  return (
    <>
      <p><Link to="/databases">All databases</Link></p>
      <div class="title-row">
        <PageTitle>{db.label}</PageTitle>
        {editable ? (
          <div class="actions">
            {db.status === 'suspended' ? <button type="button" onClick={action('resume', 'database_resume')}>Resume</button>
              : <button type="button" onClick={action('suspend', 'database_suspend')}>Suspend</button>}
            <ConfirmButton label="Delete database" danger question={`Delete the database ${db.label} and all of its data and backups?`} confirm={`Delete ${db.label}`}
              onConfirm={async () => { await call('DELETE', `${DB_BASE}/${id}`); toast(`Deleted ${db.label}`); go('/databases'); }} />
          </div>
        ) : null}
      </div>
      <ErrorBox error={err} />
      <dl class="facts">
        <dt>Status</dt><dd data-status><Status value={db.status} /></dd>
        <dt>Engine</dt><dd>{db.engine} {db.version}</dd>
        <dt>Primary host</dt><dd data-host="primary">{db.hosts.primary ?? 'not yet assigned'}</dd>
        {db.hosts.secondary ? <><dt>Secondary host</dt><dd>{db.hosts.secondary}</dd></> : null}
        <dt>Port</dt><dd data-port>{db.port}</dd>
        <dt>Region</dt><dd>{db.region}</dd>
        <dt>Type</dt><dd>{db.type}</dd>
        <dt>Cluster size</dt><dd>{db.cluster_size} ({db.replication_type})</dd>
        <dt>TLS required</dt><dd>{db.ssl_connection ? 'yes' : 'no'}</dd>
      </dl>
      <p><button type="button" onClick={() => downloadCa(id, db.label).catch(setErr)}>Download CA certificate</button></p>
      <Credentials id={id} />
      <AllowList key={db.allow_list.join(',')} db={db} editable={editable} onSaved={refresh} />
      <Backups db={db} editable={editable} onChanged={refresh} />
      <Maintenance db={db} editable={editable} onChanged={refresh} />
    </>
  );
}
