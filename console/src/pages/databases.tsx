import { useState } from 'preact/hooks';
import { all, call, canWrite } from '../api.js';
import { track } from '../activity.js';
import { usePoll } from '../router.js';
import { ErrorBox, Field, Link, PageTitle, Status, go, useAccess } from '../ui.js';
import { Select } from './nodebalancers.js';

export const DB_BASE = '/v4/databases/mysql/instances';

export function DatabaseList() {
  const access = useAccess();
  const [rows, setRows] = useState<any[]>();
  const [err, setErr] = useState<unknown>();
  usePoll(async () => {
    try {
      setRows(await all(DB_BASE));
      setErr(undefined);
    } catch (e) { setErr(e); }
  }, 5_000);
  return (
    <>
      <div class="title-row">
        <PageTitle>Databases</PageTitle>
        {canWrite(access, 'databases') ? <Link class="button primary" to="/databases/create">Create database</Link> : null}
      </div>
      <ErrorBox error={err} />
      {rows === undefined ? <p role="status">Loading…</p> : rows.length === 0 ? <p>No databases yet.</p> : (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">Databases</caption>
            <thead><tr><th scope="col">Label</th><th scope="col">Engine</th><th scope="col">Type</th><th scope="col">Cluster size</th><th scope="col">Region</th><th scope="col">Status</th></tr></thead>
            <tbody>
              {rows.map((d) => (
                <tr key={d.id}>
                  <th scope="row"><Link to={`/databases/${d.id}`}>{d.label}</Link></th>
                  <td>{d.engine} {d.version}</td>
                  <td>{d.type}</td>
                  <td>{d.cluster_size}</td>
                  <td>{d.region}</td>
                  <td><Status value={d.status} /></td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

/** Allow-list text (one address or CIDR per line or comma) to the API's array. */
export function parseAllowList(text: string): string[] {
  return text.split(/[\s,]+/).map((s) => s.trim()).filter(Boolean);
}

export function DatabaseCreate() {
  const [choices, setChoices] = useState<{ regions: string[]; types: [string, string][]; engines: [string, string][] }>({ regions: [], types: [], engines: [] });
  const [f, setF] = useState({ label: '', region: '', type: '', engine: '', cluster_size: '1', replication_type: 'none', allow_list: '', ssl_connection: true, encrypted: false });
  const [err, setErr] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  usePoll(async () => {
    const [regions, types, engines] = await Promise.all([all('/v4/regions'), all('/v4/databases/types'), all('/v4/databases/engines')]);
    const c = {
      regions: regions.map((r) => r.id as string),
      types: types.map((t) => [t.id, `${t.label} (${t.id})`] as [string, string]),
      engines: engines.filter((e) => e.engine === 'mysql').map((e) => [e.id, `MySQL ${e.version}`] as [string, string]),
    };
    setChoices(c);
    setF((o) => ({ ...o, region: o.region || c.regions[0] || '', type: o.type || c.types[0]?.[0] || '', engine: o.engine || c.engines[0]?.[0] || '' }));
  }, 600_000);
  const set = (k: keyof typeof f) => (v: string | boolean) => setF({ ...f, [k]: v });
  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setErr(undefined);
    try {
      const db = await call('POST', DB_BASE, {
        label: f.label, region: f.region, type: f.type, engine: f.engine, cluster_size: Number(f.cluster_size),
        replication_type: f.replication_type, allow_list: parseAllowList(f.allow_list), ssl_connection: f.ssl_connection, encrypted: f.encrypted,
      });
      track('database', db.id, 'database_create', db.label);
      go(`/databases/${db.id}`);
    } catch (x) { setErr(x); } finally { setBusy(false); }
  };
  return (
    <>
      <PageTitle>Create a database</PageTitle>
      <form class="form" onSubmit={submit}>
        <fieldset>
          <legend>Database</legend>
          <Field id="db-label" label="Label"><input id="db-label" value={f.label} onInput={(e) => set('label')(e.currentTarget.value)} /></Field>
          <Select id="db-engine" label="Engine" value={f.engine} options={choices.engines} onChange={set('engine')} />
          <Select id="db-region" label="Region" value={f.region} options={choices.regions} onChange={set('region')} />
          <Select id="db-type" label="Type" value={f.type} options={choices.types} onChange={set('type')} />
          <Select id="db-cluster" label="Cluster size" value={f.cluster_size} options={[['1', '1 node'], ['3', '3 nodes']]}
            onChange={(v) => setF({ ...f, cluster_size: v, replication_type: v === '1' ? 'none' : 'semi_synch' })} />
          <Select id="db-replication" label="Replication" value={f.replication_type}
            options={f.cluster_size === '1' ? ['none'] : ['semi_synch', 'asynch']} onChange={set('replication_type')} />
        </fieldset>
        <fieldset>
          <legend>Access</legend>
          <Field id="db-allow" label="Allow list" hint="IPv4 addresses or CIDR ranges that may connect, one per line or separated by commas.">
            <textarea id="db-allow" rows={3} aria-describedby="db-allow-hint" value={f.allow_list} onInput={(e) => set('allow_list')(e.currentTarget.value)} />
          </Field>
          <div class="check">
            <input id="db-ssl" type="checkbox" checked={f.ssl_connection} onChange={(e) => set('ssl_connection')(e.currentTarget.checked)} />
            <label for="db-ssl">Require TLS for connections</label>
          </div>
          <div class="check">
            <input id="db-encrypted" type="checkbox" checked={f.encrypted} onChange={(e) => set('encrypted')(e.currentTarget.checked)} />
            <label for="db-encrypted">Encrypt backups</label>
          </div>
        </fieldset>
        <ErrorBox error={err} />
        <button type="submit" class="primary" disabled={busy}>Create database</button>
      </form>
    </>
  );
}
