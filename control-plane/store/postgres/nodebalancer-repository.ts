import type { SecretBox } from '../../../lib/secret-box.js';
import type { NodeBalancerRepository } from '../../domain/nodebalancers/repository.js';
import { BUCKET_MS, CONFIG_COLUMNS, configRow, configValues, nbRow, nodeRow, type ConfigRow, type NodeBalancerRow, type NodeRow, type TrafficRow } from '../common/rows.js';
import { nextSequenceId } from './core-repositories.js';
import type { PgExecutor } from './executor.js';

/** PostgreSQL adapter of the NodeBalancer port (tables of common/migrations.ts; ssl_key sealed as in SQLite). */
export function pgNodeBalancers(x: PgExecutor, box: SecretBox): NodeBalancerRepository {
  const values = (c: Parameters<typeof configValues>[0]) => {
    const p = configValues(c, box);
    return CONFIG_COLUMNS.map((k) => p[k]);
  };
  const quoted = CONFIG_COLUMNS.map((c) => `"${c}"`);
  return {
    transaction: (fn) => x.transaction(fn),
    list: async () => (await x.rows<NodeBalancerRow>('SELECT * FROM nodebalancers ORDER BY id')).map((r) => nbRow(r)!),
    get: async (id) => nbRow(await x.one<NodeBalancerRow>('SELECT * FROM nodebalancers WHERE id = $1', [id])),
    byLabel: async (label) => nbRow(await x.one<NodeBalancerRow>('SELECT * FROM nodebalancers WHERE label = $1', [label])),
    async create(nb) {
      const id = await x.transaction(async () => {
        const next = await nextSequenceId(x, 'nodebalancers');
        await x.query(
          'INSERT INTO nodebalancers (id, label, region, ipv4, ipv6, client_conn_throttle, client_udp_sess_throttle, type, tags, created, updated) VALUES ($1,$2,$3,$4,$5,$6,$7,$8,$9,$10,$11)',
          [next, nb.label, nb.region, nb.ipv4, nb.ipv6, nb.clientConnThrottle, nb.clientUdpSessThrottle, nb.type, JSON.stringify(nb.tags), nb.created, nb.updated],
        );
        return next;
      });
      return { ...nb, id };
    },
    async update(id, p) {
      await x.transaction(async () => {
        const cur = nbRow(await x.one<NodeBalancerRow>('SELECT * FROM nodebalancers WHERE id = $1 FOR UPDATE', [id]));
        if (!cur) return;
        const next = { ...cur, ...p };
        await x.query('UPDATE nodebalancers SET label = $1, client_conn_throttle = $2, client_udp_sess_throttle = $3, tags = $4, updated = $5 WHERE id = $6',
          [next.label, next.clientConnThrottle, next.clientUdpSessThrottle, JSON.stringify(next.tags), next.updated, id]);
      });
    },
    delete: (id) => x.transaction(async () => {
      await x.query('DELETE FROM nodebalancers WHERE id = $1', [id]);
      await x.query('DELETE FROM nb_traffic WHERE nodebalancer_id = $1', [id]);
    }),
    setIpv4: async (id, ipv4) => void (await x.query('UPDATE nodebalancers SET ipv4 = $1 WHERE id = $2', [ipv4, id])),
    setIpv6: async (id, ipv6) => void (await x.query('UPDATE nodebalancers SET ipv6 = $1 WHERE id = $2', [ipv6, id])),

    configs: async (nbId) => (await x.rows<ConfigRow>('SELECT * FROM nb_configs WHERE nodebalancer_id = $1 ORDER BY id', [nbId])).map((r) => configRow(r, box)!),
    config: async (nbId, id) => configRow(await x.one<ConfigRow>('SELECT * FROM nb_configs WHERE nodebalancer_id = $1 AND id = $2', [nbId, id]), box),
    async createConfig(nbId, c) {
      const id = await x.transaction(async () => {
        const next = await nextSequenceId(x, 'nb_configs');
        const vals = [next, nbId, ...values(c)];
        await x.query(`INSERT INTO nb_configs (id, nodebalancer_id, ${quoted.join(', ')}) VALUES (${vals.map((_, i) => `$${i + 1}`).join(', ')})`, vals);
        return next;
      });
      return { ...c, id, nodebalancerId: nbId };
    },
    async updateConfig(id, c) {
      const vals = values(c);
      await x.query(`UPDATE nb_configs SET ${quoted.map((col, i) => `${col} = $${i + 1}`).join(', ')} WHERE id = $${vals.length + 1}`, [...vals, id]);
    },
    deleteConfig: async (id) => void (await x.query('DELETE FROM nb_configs WHERE id = $1', [id])),

    nodes: async (cid) => (await x.rows<NodeRow>('SELECT * FROM nb_nodes WHERE config_id = $1 ORDER BY id', [cid])).map((r) => nodeRow(r)!),
    nodesOfNodeBalancer: async (nbId) => (await x.rows<NodeRow>('SELECT * FROM nb_nodes WHERE nodebalancer_id = $1 ORDER BY id', [nbId])).map((r) => nodeRow(r)!),
    node: async (cid, id) => nodeRow(await x.one<NodeRow>('SELECT * FROM nb_nodes WHERE config_id = $1 AND id = $2', [cid, id])),
    async createNode(nbId, cid, n) {
      const id = await x.transaction(async () => {
        const next = await nextSequenceId(x, 'nb_nodes');
        await x.query('INSERT INTO nb_nodes (id, config_id, nodebalancer_id, label, address, weight, mode, status) VALUES ($1,$2,$3,$4,$5,$6,$7,$8)',
          [next, cid, nbId, n.label, n.address, n.weight, n.mode, 'unknown']);
        return next;
      });
      return { ...n, id, configId: cid, nodebalancerId: nbId, status: 'unknown' };
    },
    // As in SQLite: a node at a new address, or out of reject, is `unknown` again until a data
    // plane reports on it (the CASE reads the row as it was before this update).
    updateNode: async (id, n) =>
      void (await x.query(`UPDATE nb_nodes SET label = $1, address = $2, weight = $3, mode = $4,
        status = CASE WHEN address <> $2 OR (mode = 'reject' AND $4 <> 'reject') THEN 'unknown' ELSE status END WHERE id = $5`,
      [n.label, n.address, n.weight, n.mode, id])),
    deleteNode: async (id) => void (await x.query('DELETE FROM nb_nodes WHERE id = $1', [id])),
    setNodeStatus: async (id, status) => ((await x.query('UPDATE nb_nodes SET status = $1 WHERE id = $2 AND status != $1', [status, id])).rowCount ?? 0) > 0,

    async addTraffic(nbId, cid, atMs, d) {
      const bucket = Math.floor(atMs / BUCKET_MS) * BUCKET_MS;
      await x.query(
        `INSERT INTO nb_traffic (nodebalancer_id, config_id, bucket, bytes_in, bytes_out, connections) VALUES ($1,$2,$3,$4,$5,$6)
         ON CONFLICT (nodebalancer_id, config_id, bucket) DO UPDATE SET bytes_in = nb_traffic.bytes_in + excluded.bytes_in,
           bytes_out = nb_traffic.bytes_out + excluded.bytes_out, connections = nb_traffic.connections + excluded.connections`,
        [nbId, cid, bucket, d.bytesIn, d.bytesOut, d.connections],
      );
    },
    traffic: async (nbId, since) =>
      x.rows<TrafficRow>(
        `SELECT bucket, SUM(bytes_in)::bigint AS "bytesIn", SUM(bytes_out)::bigint AS "bytesOut", SUM(connections)::bigint AS connections
         FROM nb_traffic WHERE nodebalancer_id = $1 AND bucket >= $2 GROUP BY bucket ORDER BY bucket`,
        [nbId, since],
      ),
  };
}
