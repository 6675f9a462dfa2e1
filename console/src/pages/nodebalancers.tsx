import { useState } from 'preact/hooks';
import { all, call, canWrite } from '../api.js';
import { track } from '../activity.js';
import { usePoll } from '../router.js';
import { ErrorBox, Field, Link, PageTitle, go, useAccess } from '../ui.js';

interface NbRow { id: number; label: string; region: string; ipv4: string; hostname: string; up: number; down: number }

export function NodeBalancerList() {
  const access = useAccess();
  const [rows, setRows] = useState<NbRow[]>();
  const [err, setErr] = useState<unknown>();
  usePoll(async () => {
    try {
      const nbs = await all('/v4/nodebalancers');
      const out: NbRow[] = [];
      for (const nb of nbs) {
        const configs = await all(`/v4/nodebalancers/${nb.id}/configs`);
        const up = configs.reduce((a, c) => a + (c.nodes_status?.up ?? 0), 0);
        const down = configs.reduce((a, c) => a + (c.nodes_status?.down ?? 0), 0);
        out.push({ id: nb.id, label: nb.label, region: nb.region, ipv4: nb.ipv4, hostname: nb.hostname, up, down });
      }
      setRows(out);
      setErr(undefined);
    } catch (e) {
      setErr(e);
    }
  }, 5_000);
  return (
    <>
      <div class="title-row">
        <PageTitle>NodeBalancers</PageTitle>
        {canWrite(access, 'nodebalancers') ? <Link class="button primary" to="/nodebalancers/create">Create NodeBalancer</Link> : null}
      </div>
      <ErrorBox error={err} />
      {rows === undefined ? <p role="status">Loading…</p> : rows.length === 0 ? <p>No NodeBalancers yet.</p> : (
        <div class="table-wrap">
          <table>
            <caption class="sr-only">NodeBalancers</caption>
            <thead><tr><th scope="col">Label</th><th scope="col">Region</th><th scope="col">Address</th><th scope="col">Nodes up</th><th scope="col">Nodes down</th></tr></thead>
            <tbody>
              {rows.map((r) => (
                <tr key={r.id}>
                  <th scope="row"><Link to={`/nodebalancers/${r.id}`}>{r.label}</Link></th>
                  <td>{r.region}</td>
                  <td>{r.ipv4}</td>
                  <td>{r.up}</td>
                  <td class={r.down > 0 ? 'bad' : undefined}>{r.down}</td>
                </tr>
              ))}
            </tbody>
          </table>
        </div>
      )}
    </>
  );
}

export interface NodeDraft { label: string; address: string; weight: string; mode: string }

export function Select(props: { id: string; label: string; value: string; options: readonly (string | [string, string])[]; onChange: (v: string) => void }) {
  return (
    <Field id={props.id} label={props.label}>
      <select id={props.id} value={props.value} onChange={(e) => props.onChange(e.currentTarget.value)}>
        {props.options.map((o) => (typeof o === 'string' ? <option key={o} value={o}>{o}</option> : <option key={o[0]} value={o[0]}>{o[1]}</option>))}
      </select>
    </Field>
  );
}

export const modes = ['accept', 'reject', 'drain', 'backup'] as const;

function readFile(input: HTMLInputElement): Promise<string> {
  const f = input.files?.[0];
  return f ? f.text() : Promise.resolve('');
}

export function NodeBalancerCreate() {
  const [regions, setRegions] = useState<string[]>([]);
  const [f, setF] = useState({
    label: '', region: '', protocol: 'http', port: '80', algorithm: 'roundrobin', stickiness: 'none',
    check: 'http', check_path: '/', check_interval: '5', check_timeout: '3', check_attempts: '2', ssl_cert: '', ssl_key: '',
  });
  const [nodes, setNodes] = useState<NodeDraft[]>([{ label: '', address: '', weight: '100', mode: 'accept' }]);
  const [err, setErr] = useState<unknown>();
  const [busy, setBusy] = useState(false);
  usePoll(async () => {
    const r = (await all('/v4/regions')).map((x) => x.id as string);
    setRegions(r);
    setF((old) => (old.region ? old : { ...old, region: r[0] ?? '' }));
  }, 600_000);
  const set = (k: keyof typeof f) => (v: string) => setF({ ...f, [k]: v });
  const text = (k: keyof typeof f, label: string, type = 'text') => (
    <Field id={`nb-${k}`} label={label}>
      <input id={`nb-${k}`} type={type} value={f[k]} onInput={(e) => set(k)(e.currentTarget.value)} />
    </Field>
  );
  const setNode = (i: number, k: keyof NodeDraft, v: string) => setNodes(nodes.map((n, j) => (j === i ? { ...n, [k]: v } : n)));

  const submit = async (e: Event) => {
    e.preventDefault();
    setBusy(true);
    setErr(undefined);
    try {
      const config: Record<string, unknown> = {
        protocol: f.protocol, port: Number(f.port), algorithm: f.algorithm, stickiness: f.stickiness, check: f.check,
        check_interval: Number(f.check_interval), check_timeout: Number(f.check_timeout), check_attempts: Number(f.check_attempts),
        nodes: nodes.filter((n) => n.address.trim() !== '').map((n) => ({ label: n.label, address: n.address.trim(), weight: Number(n.weight), mode: n.mode })),
      };
      if (f.check === 'http' || f.check === 'http_body') config.check_path = f.check_path;
      if (f.protocol === 'https') Object.assign(config, { ssl_cert: f.ssl_cert, ssl_key: f.ssl_key });
      const nb = await call('POST', '/v4/nodebalancers', { label: f.label, region: f.region, configs: [config] });
      track('nodebalancer', nb.id, 'nodebalancer_create', nb.label);
      go(`/nodebalancers/${nb.id}`);
    } catch (x) {
      setErr(x);
    } finally {
      setBusy(false);
    }
  };

  return (
    <>
      <PageTitle>Create a NodeBalancer</PageTitle>
      <form onSubmit={submit} class="form">
        <fieldset>
          <legend>NodeBalancer</legend>
          {text('label', 'Label')}
          <Select id="nb-region" label="Region" value={f.region} options={regions} onChange={set('region')} />
        </fieldset>
        <fieldset>
          <legend>Configuration</legend>
          <Select id="nb-protocol" label="Protocol" value={f.protocol} options={['http', 'https', 'tcp']} onChange={set('protocol')} />
          {text('port', 'Port', 'number')}
          <Select id="nb-algorithm" label="Algorithm" value={f.algorithm} options={['roundrobin', 'leastconn', 'source']} onChange={set('algorithm')} />
          <Select id="nb-stickiness" label="Session stickiness" value={f.stickiness} options={['none', 'table', 'http_cookie']} onChange={set('stickiness')} />
          <Select id="nb-check" label="Health check" value={f.check} options={['none', 'connection', 'http', 'http_body']} onChange={set('check')} />
          {f.check === 'http' || f.check === 'http_body' ? text('check_path', 'Check path') : null}
          {text('check_interval', 'Check interval (seconds)', 'number')}
          {text('check_timeout', 'Check timeout (seconds)', 'number')}
          {text('check_attempts', 'Check attempts', 'number')}
          {f.protocol === 'https' ? (
            <>
              <Field id="nb-cert" label="TLS certificate (PEM file)">
                <input id="nb-cert" type="file" accept=".pem,.crt,.cer" onChange={async (e) => set('ssl_cert')(await readFile(e.currentTarget))} />
              </Field>
              <Field id="nb-key" label="TLS private key (PEM file)">
                <input id="nb-key" type="file" accept=".pem,.key" onChange={async (e) => set('ssl_key')(await readFile(e.currentTarget))} />
              </Field>
            </>
          ) : null}
        </fieldset>
        <fieldset>
          <legend>Nodes</legend>
          {nodes.map((n, i) => (
            <div class="node-row" key={i} role="group" aria-label={`Node ${i + 1}`}>
              <Field id={`node-${i}-label`} label={`Node ${i + 1} label`}>
                <input id={`node-${i}-label`} value={n.label} onInput={(e) => setNode(i, 'label', e.currentTarget.value)} />
              </Field>
              <Field id={`node-${i}-address`} label={`Node ${i + 1} address (ip:port)`}>
                <input id={`node-${i}-address`} value={n.address} onInput={(e) => setNode(i, 'address', e.currentTarget.value)} />
              </Field>
              <Field id={`node-${i}-weight`} label={`Node ${i + 1} weight`}>
                <input id={`node-${i}-weight`} type="number" min="1" max="255" value={n.weight} onInput={(e) => setNode(i, 'weight', e.currentTarget.value)} />
              </Field>
              <Select id={`node-${i}-mode`} label={`Node ${i + 1} mode`} value={n.mode} options={modes} onChange={(v) => setNode(i, 'mode', v)} />
              {nodes.length > 1 ? <button type="button" onClick={() => setNodes(nodes.filter((_, j) => j !== i))}>Remove node {i + 1}</button> : null}
            </div>
          ))}
          <button type="button" onClick={() => setNodes([...nodes, { label: '', address: '', weight: '100', mode: 'accept' }])}>Add a node</button>
        </fieldset>
        <ErrorBox error={err} />
        <button type="submit" class="primary" disabled={busy}>Create NodeBalancer</button>
      </form>
    </>
  );
}
