import { useRef, useState } from 'preact/hooks';
import { ApiError, all, call, canWrite } from '../api.js';
import { Chart } from '../chart.js';
import { usePoll } from '../router.js';
import { ConfirmButton, ErrorBox, Link, PageTitle, Status, go, toast, useAccess } from '../ui.js';
import { modes } from './nodebalancers.js';

interface NodeWire { id: number; label: string; address: string; status: string; mode: string; weight: number; config_id: number }

function NodeRow(props: { nbId: number; node: NodeWire; editable: boolean; onChanged: () => void }) {
  const n = props.node;
  const [mode, setMode] = useState(n.mode);
  const [weight, setWeight] = useState(String(n.weight));
  const [err, setErr] = useState<unknown>();
  const url = `/v4/nodebalancers/${props.nbId}/configs/${n.config_id}/nodes/${n.id}`;
  const dirty = mode !== n.mode || weight !== String(n.weight);
  return (
    <tr data-node={n.label}>
      <th scope="row">{n.label}</th>
      <td>{n.address}</td>
      <td><Status value={n.status} /></td>
      <td>
        {props.editable ? (
          <select aria-label={`Mode of ${n.label}`} value={mode} onChange={(e) => setMode(e.currentTarget.value)}>
            {modes.map((m) => <option key={m} value={m}>{m}</option>)}
          </select>
        ) : n.mode}
      </td>
      <td>
        {props.editable ? <input aria-label={`Weight of ${n.label}`} type="number" min="1" max="255" value={weight} onInput={(e) => setWeight(e.currentTarget.value)} /> : n.weight}
      </td>
      {props.editable ? (
        <td class="actions">
          <button type="button" disabled={!dirty} onClick={async () => {
            try {
              await call('PUT', url, { mode, weight: Number(weight) });
              setErr(undefined);
              toast(`Saved node ${n.label}`);
              props.onChanged();
            } catch (e) { setErr(e); }
          }}>Save {n.label}</button>
          <ConfirmButton label={`Remove ${n.label}`} danger question={`Remove node ${n.label} (${n.address})?`} confirm={`Remove node ${n.label}`}
            onConfirm={async () => { await call('DELETE', url); props.onChanged(); }} />
          <ErrorBox error={err} />
        </td>
      ) : null}
    </tr>
  );
}

function AddNode(props: { nbId: number; configId: number; onAdded: () => void }) {
  const [label, setLabel] = useState('');
  const [address, setAddress] = useState('');
  const [err, setErr] = useState<unknown>();
  const id = `add-${props.configId}`;
  return (
    <form class="inline-form" onSubmit={async (e) => {
      e.preventDefault();
      try {
        await call('POST', `/v4/nodebalancers/${props.nbId}/configs/${props.configId}/nodes`, { label, address });
        setLabel(''); setAddress(''); setErr(undefined);
        props.onAdded();
      } catch (x) { setErr(x); }
    }}>
      <label for={`${id}-label`}>New node label</label>
      <input id={`${id}-label`} value={label} onInput={(e) => setLabel(e.currentTarget.value)} />
      <label for={`${id}-address`}>New node address</label>
      <input id={`${id}-address`} value={address} onInput={(e) => setAddress(e.currentTarget.value)} />
      <button type="submit">Add node</button>
      <ErrorBox error={err} />
    </form>
  );
}

type Stats = { connections: [number, number][]; traffic: { in: [number, number][]; out: [number, number][] } };

export function NodeBalancerDetail({ id }: { id: number }) {
  const access = useAccess();
  const editable = canWrite(access, 'nodebalancers');
  const [nb, setNb] = useState<any>();
  const [configs, setConfigs] = useState<{ config: any; nodes: NodeWire[] }[]>([]);
  const [stats, setStats] = useState<Stats | null>();
  const [err, setErr] = useState<unknown>();
  const [tick, setTick] = useState(0);
  const nbRef = useRef<any>(undefined);

  usePoll(async () => {
    try {
      const got = await call('GET', `/v4/nodebalancers/${id}`);
      nbRef.current = got;
      setNb(got);
      const cs = await all(`/v4/nodebalancers/${id}/configs`);
      setConfigs(await Promise.all(cs.map(async (config) => ({ config, nodes: await all<NodeWire>(`/v4/nodebalancers/${id}/configs/${config.id}/nodes`) }))));
      setErr(undefined);
    } catch (e) { setErr(e); }
  }, 3_000, [id, tick]);
  usePoll(async () => {
    // /stats answers 400 until the NodeBalancer has carried traffic: ask only once `transfer`
    // shows some, so the page causes no failed requests (docs/console.md).
    if (nbRef.current?.transfer?.total === null || nbRef.current?.transfer?.total === undefined) return setStats(null);
    try {
      setStats((await call<{ data: Stats }>('GET', `/v4/nodebalancers/${id}/stats`)).data);
    } catch (e) {
      // 400 until the NodeBalancer has carried traffic today (docs/api.md).
      if (e instanceof ApiError && e.status === 400) setStats(null);
      else setErr(e);
    }
  }, 10_000, [id]);

  if (!nb) return <><PageTitle>NodeBalancer</PageTitle><ErrorBox error={err} />{err ? null : <p role="status">Loading…</p>}</>;
  return (
    <>
      <p><Link to="/nodebalancers">All NodeBalancers</Link></p>
      <div class="title-row">
        <PageTitle>{nb.label}</PageTitle>
        {editable ? <ConfirmButton label="Delete NodeBalancer" danger question={`Delete the NodeBalancer ${nb.label}? Its address stops answering at once.`}
          confirm={`Delete ${nb.label}`} onConfirm={async () => { await call('DELETE', `/v4/nodebalancers/${id}`); toast(`Deleted ${nb.label}`); go('/nodebalancers'); }} /> : null}
      </div>
      <ErrorBox error={err} />
      <dl class="facts">
        <dt>Region</dt><dd>{nb.region}</dd>
        <dt>IPv4</dt><dd>{nb.ipv4}</dd>
        <dt>Hostname</dt><dd>{nb.hostname}</dd>
        <dt>Transfer this month</dt><dd>{nb.transfer?.total ?? 0} MB</dd>
      </dl>
      {configs.map(({ config, nodes }) => (
        <section key={config.id} aria-labelledby={`cfg-${config.id}`}>
          <h2 id={`cfg-${config.id}`}>Port {config.port} ({config.protocol}, {config.algorithm})</h2>
          <p>Nodes up: <strong data-up={config.id}>{config.nodes_status.up}</strong>, down: <strong data-down={config.id}>{config.nodes_status.down}</strong>. Check: {config.check}, stickiness: {config.stickiness}.</p>
          <div class="table-wrap">
            <table>
              <caption class="sr-only">Nodes of port {config.port}</caption>
              <thead><tr><th scope="col">Label</th><th scope="col">Address</th><th scope="col">Status</th><th scope="col">Mode</th><th scope="col">Weight</th>{editable ? <th scope="col">Actions</th> : null}</tr></thead>
              <tbody>
                {nodes.map((n) => <NodeRow key={`${n.id}-${n.mode}-${n.weight}`} nbId={id} node={n} editable={editable} onChanged={() => setTick(tick + 1)} />)}
              </tbody>
            </table>
          </div>
          {editable ? <AddNode nbId={id} configId={config.id} onAdded={() => setTick(tick + 1)} /> : null}
        </section>
      ))}
      <section aria-labelledby="graphs">
        <h2 id="graphs">Traffic (5-minute averages, refreshed every 10 seconds)</h2>
        {stats === undefined ? <p role="status">Loading graphs…</p> : stats === null ? <p>No traffic reported yet today.</p> : (
          <div class="charts">
            <Chart title="Connections" unit="connections/s" series={[{ label: 'Connections', points: stats.connections, color: '#2a6fdb' }]} />
            <Chart title="Traffic" unit="bits/s" series={[{ label: 'In', points: stats.traffic.in, color: '#1b8a5a' }, { label: 'Out', points: stats.traffic.out, color: '#b0452c' }]} />
          </div>
        )}
      </section>
    </>
  );
}
