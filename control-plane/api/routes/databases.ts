import { FulcrumError } from '../../../lib/errors.js';
import type { Router } from '../router.js';
import { idParam } from '../router.js';
import { applyFilter, parseFilter } from '../filter.js';
import { paginate, parsePage } from '../pagination.js';
import type { DatabaseService } from '../../domain/databases/database-service.js';
import type { EngineCatalogue } from '../../domain/databases/catalogue.js';
import type { DatabaseRecord } from '../../domain/databases/model.js';
import { configDescription } from '../../domain/databases/engine-config.js';
import { databaseTypes, findType, typeToWire } from '../../domain/databases/types.js';
import { backupToWire, databaseSummaryToWire, databaseToWire, engineToWire } from '../wire/databases.js';

const R = 'databases:read_only';
const W = 'databases:read_write';
// platform, created and cluster_size: Cloud Manager filters on the first and sorts by the others.
const DB_FILTER = ['label', 'type', 'engine', 'version', 'region', 'status', 'platform', 'created', 'cluster_size'];

export interface DatabaseRouteDeps {
  service: DatabaseService;
  engines: EngineCatalogue;
}

const xf = (h: Record<string, string | string[] | undefined>) => h['x-filter'] as string | undefined;

/** /databases/engines, /databases/types, /databases/instances and /databases/mysql/instances/... */
export function databaseRoutes(r: Router, d: DatabaseRouteDeps): void {
  const id = (p: Record<string, string>) => idParam(p, 'instanceId');
  const full = (db: DatabaseRecord) => databaseToWire(db, d.service.pendingUpdates(db));
  const engineById = (engineId: string) => {
    const e = d.engines.get(engineId);
    if (!e) throw FulcrumError.notFound();
    return engineToWire(e);
  };

  r.publicGet('/databases/engines', (c) => {
    const page = parsePage(c.query);
    return paginate(applyFilter(d.engines.list().map(engineToWire), parseFilter(xf(c.headers), ['engine', 'version'])), page);
  });
  // linodego and @linode/api-v4 encode the slash (mysql%2F8.0.30); the CLI sends it raw.
  r.publicGet('/databases/engines/:engineId', (c) => engineById(c.params.engineId ?? ''));
  r.publicGet('/databases/engines/:engine/:version', (c) => engineById(`${c.params.engine}/${c.params.version}`));

  r.publicGet('/databases/types', (c) => {
    const page = parsePage(c.query);
    // `deprecated` and `platform` are filterable but absent from real responses: filter as if
    // they were false and 'rdbms-default' (Cloud Manager asks for {"platform": "rdbms-default"}).
    const filter = parseFilter(xf(c.headers), ['deprecated', 'platform', 'class', 'id', 'label', 'memory', 'vcpus', 'disk']);
    const rows = applyFilter(databaseTypes.map((t) => ({ wire: typeToWire(t), deprecated: false, platform: 'rdbms-default', ...typeToWire(t) })), filter);
    return paginate(rows.map((x) => x.wire), page);
  });
  r.publicGet('/databases/types/:typeId', (c) => {
    const t = findType(c.params.typeId ?? '');
    if (!t) throw FulcrumError.notFound();
    return typeToWire(t);
  });

  // The keys engine_config takes, with types, limits and whether a change restarts the servers.
  r.publicGet('/databases/mysql/config', () => configDescription());

  r.get('/databases/instances', R, async (c) => {
    const page = parsePage(c.query);
    return paginate(applyFilter((await d.service.list(c.actor)).map((db) => databaseSummaryToWire(db, d.service.pendingUpdates(db))), parseFilter(xf(c.headers), DB_FILTER)), page);
  });

  const base = '/databases/mysql/instances';
  r.get(base, R, async (c) => {
    const page = parsePage(c.query);
    return paginate(applyFilter((await d.service.list(c.actor)).map(full), parseFilter(xf(c.headers), DB_FILTER)), page);
  });
  // Actions answer an empty object once the change is stored.
  const done = async (p: Promise<void>) => {
    await p;
    return {};
  };
  r.post(base, W, async (c) => full(await d.service.create(c.actor, c.body)));
  r.get(`${base}/:instanceId`, R, async (c) => full(await d.service.get(c.actor, id(c.params))));
  r.put(`${base}/:instanceId`, W, async (c) => full(await d.service.update(c.actor, id(c.params), c.body)));
  r.delete(`${base}/:instanceId`, W, (c) => done(d.service.delete(c.actor, id(c.params))));

  r.get(`${base}/:instanceId/credentials`, R, (c) => d.service.credentials(c.actor, id(c.params)));
  r.post(`${base}/:instanceId/credentials/reset`, W, (c) => done(d.service.resetCredentials(c.actor, id(c.params))));
  r.get(`${base}/:instanceId/ssl`, R, (c) => d.service.ssl(c.actor, id(c.params)));
  r.post(`${base}/:instanceId/patch`, W, (c) => done(d.service.patch(c.actor, id(c.params))));
  r.post(`${base}/:instanceId/suspend`, W, (c) => done(d.service.suspend(c.actor, id(c.params))));
  r.post(`${base}/:instanceId/resume`, W, (c) => done(d.service.resume(c.actor, id(c.params))));

  // Backup list and view need read_write, as observed on the real service.
  const bid = (p: Record<string, string>) => idParam(p, 'backupId');
  r.get(`${base}/:instanceId/backups`, W, async (c) => {
    const page = parsePage(c.query);
    return paginate(applyFilter((await d.service.backups(c.actor, id(c.params))).map(backupToWire), parseFilter(xf(c.headers), ['type', 'created'])), page);
  });
  r.post(`${base}/:instanceId/backups`, W, (c) => done(d.service.snapshot(c.actor, id(c.params), c.body)));
  r.get(`${base}/:instanceId/backups/:backupId`, W, async (c) => backupToWire(await d.service.backup(c.actor, id(c.params), bid(c.params))));
  r.delete(`${base}/:instanceId/backups/:backupId`, W, (c) => done(d.service.deleteBackup(c.actor, id(c.params), bid(c.params))));
  r.post(`${base}/:instanceId/backups/:backupId/restore`, W, (c) => done(d.service.restore(c.actor, id(c.params), bid(c.params))));
}
