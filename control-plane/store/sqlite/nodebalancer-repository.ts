import type { Db } from './database.js';
import type { NodeBalancerRepository } from '../../domain/nodebalancers/repository.js';
import type { Immediate } from './gate.js';
import { gateOf } from './gate.js';
import { nextSequenceId } from './core-repositories.js';
import { sealUnderLock, secretsOf } from './secrets.js';
import { BUCKET_MS, CONFIG_COLUMNS, configRow, configValues, nbRow, nodeRow, type ConfigRow, type NodeBalancerRow, type NodeRow, type TrafficRow } from '../common/rows.js';

export const sqliteNodeBalancers = (db: Db): NodeBalancerRepository => gateOf(db).wrap<NodeBalancerRepository>(immediateNodeBalancers(db));

function immediateNodeBalancers(db: Db): Omit<Immediate<NodeBalancerRepository>, 'transaction'> {
  const box = secretsOf(db);
  const configCols = CONFIG_COLUMNS.map((c) => `"${c}"`).join(', ');
  const configVals = CONFIG_COLUMNS.map((c) => `@${c}`).join(', ');
  const insertConfig = db.prepare(`INSERT INTO nb_configs (id, nodebalancer_id, ${configCols}) VALUES (@id, @nodebalancer_id, ${configVals})`);
  const nbs = (sql: string) => db.prepare<unknown[], NodeBalancerRow>(sql);
  const configs = (sql: string) => db.prepare<unknown[], ConfigRow>(sql);
  const nodes = (sql: string) => db.prepare<unknown[], NodeRow>(sql);
  // better-sqlite3 transactions nest as savepoints, so these are safe inside the service's own
  // (the gate's BEGIN included). On their own they are immediate, like every transaction here
  // (docs/security/secrets.md, "Rotation").
  const tx = <T>(fn: () => T): T => db.transaction(fn).immediate();
  const updateConfig = db.prepare(
    `UPDATE nb_configs SET ${CONFIG_COLUMNS.map((c) => `"${c}" = @${c}`).join(', ')} WHERE id = @id`,
  );

  return {
    list: () => nbs('SELECT * FROM nodebalancers ORDER BY id').all().map((r) => nbRow(r)!),
    get: (id) => nbRow(nbs('SELECT * FROM nodebalancers WHERE id = ?').get(id)),
    byLabel: (label) => nbRow(nbs('SELECT * FROM nodebalancers WHERE label = ?').get(label)),
    create(nb) {
      const id = tx(() => {
        const next = nextSequenceId(db, 'nodebalancers');
        db.prepare('INSERT INTO nodebalancers (id, label, region, ipv4, client_conn_throttle, client_udp_sess_throttle, type, tags, created, updated) VALUES (?,?,?,?,?,?,?,?,?,?)')
          .run(next, nb.label, nb.region, nb.ipv4, nb.clientConnThrottle, nb.clientUdpSessThrottle, nb.type, JSON.stringify(nb.tags), nb.created, nb.updated);
        return next;
      });
      return { ...nb, id };
    },
    update(id, p) {
      const cur = nbRow(nbs('SELECT * FROM nodebalancers WHERE id = ?').get(id));
      if (!cur) return;
      const next = { ...cur, ...p };
      db.prepare('UPDATE nodebalancers SET label = ?, client_conn_throttle = ?, client_udp_sess_throttle = ?, tags = ?, updated = ? WHERE id = ?').run(
        next.label, next.clientConnThrottle, next.clientUdpSessThrottle, JSON.stringify(next.tags), next.updated, id,
      );
    },
    delete: (id) =>
      tx(() => {
        db.prepare('DELETE FROM nodebalancers WHERE id = ?').run(id);
        db.prepare('DELETE FROM nb_traffic WHERE nodebalancer_id = ?').run(id);
      }),
    setIpv4: (id, ipv4) => void db.prepare('UPDATE nodebalancers SET ipv4 = ? WHERE id = ?').run(ipv4, id),
    setIpv6: (id, ipv6) => void db.prepare('UPDATE nodebalancers SET ipv6 = ? WHERE id = ?').run(ipv6, id),

    configs: (nbId) => configs('SELECT * FROM nb_configs WHERE nodebalancer_id = ? ORDER BY id').all(nbId).map((r) => configRow(r, box)!),
    config: (nbId, id) => configRow(configs('SELECT * FROM nb_configs WHERE nodebalancer_id = ? AND id = ?').get(nbId, id), box),
    createConfig(nbId, c) {
      const id = tx(() => {
        const next = nextSequenceId(db, 'nb_configs');
        insertConfig.run({ id: next, nodebalancer_id: nbId, ...configValues(c, box) });
        return next;
      });
      return { ...c, id, nodebalancerId: nbId };
    },
    updateConfig: (id, c) => void sealUnderLock(db, () => updateConfig.run({ id, ...configValues(c, box) })),
    deleteConfig: (id) => void db.prepare('DELETE FROM nb_configs WHERE id = ?').run(id),

    nodes: (cid) => nodes('SELECT * FROM nb_nodes WHERE config_id = ? ORDER BY id').all(cid).map((r) => nodeRow(r)!),
    nodesOfNodeBalancer: (nbId) =>
      nodes('SELECT * FROM nb_nodes WHERE nodebalancer_id = ? ORDER BY id').all(nbId).map((r) => nodeRow(r)!),
    node: (cid, id) => nodeRow(nodes('SELECT * FROM nb_nodes WHERE config_id = ? AND id = ?').get(cid, id)),
    createNode(nbId, cid, n) {
      const id = tx(() => {
        const next = nextSequenceId(db, 'nb_nodes');
        db.prepare('INSERT INTO nb_nodes (id, config_id, nodebalancer_id, label, address, weight, mode, status) VALUES (?,?,?,?,?,?,?,?)')
          .run(next, cid, nbId, n.label, n.address, n.weight, n.mode, 'unknown');
        return next;
      });
      return { ...n, id, configId: cid, nodebalancerId: nbId, status: 'unknown' };
    },
    // A node at a new address, or out of reject, is one nothing has seen yet: `unknown` again
    // until a data plane reports on it (the data plane restarts its state the same way).
    updateNode: (id, n) =>
      void db.prepare(`UPDATE nb_nodes SET label = @label, address = @address, weight = @weight, mode = @mode,
        status = CASE WHEN address != @address OR (mode = 'reject' AND @mode != 'reject') THEN 'unknown' ELSE status END WHERE id = @id`)
        .run({ label: n.label, address: n.address, weight: n.weight, mode: n.mode, id }),
    deleteNode: (id) => void db.prepare('DELETE FROM nb_nodes WHERE id = ?').run(id),
    setNodeStatus: (id, status) => db.prepare('UPDATE nb_nodes SET status = ? WHERE id = ? AND status != ?').run(status, id, status).changes > 0,

    addTraffic(nbId, cid, atMs, d) {
      const bucket = Math.floor(atMs / BUCKET_MS) * BUCKET_MS;
      db.prepare(
        `INSERT INTO nb_traffic (nodebalancer_id, config_id, bucket, bytes_in, bytes_out, connections) VALUES (?,?,?,?,?,?)
         ON CONFLICT(nodebalancer_id, config_id, bucket) DO UPDATE SET bytes_in = bytes_in + excluded.bytes_in,
           bytes_out = bytes_out + excluded.bytes_out, connections = connections + excluded.connections`,
      ).run(nbId, cid, bucket, d.bytesIn, d.bytesOut, d.connections);
    },
    traffic: (nbId, since) =>
      db
        .prepare<unknown[], TrafficRow>(
          `SELECT bucket, SUM(bytes_in) AS bytesIn, SUM(bytes_out) AS bytesOut, SUM(connections) AS connections
           FROM nb_traffic WHERE nodebalancer_id = ? AND bucket >= ? GROUP BY bucket ORDER BY bucket`,
        )
        .all(nbId, since),
  };
}
