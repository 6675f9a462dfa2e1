import { execFile } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { promisify } from 'node:util';
import { FulcrumError } from '../lib/errors.js';

const run = promisify(execFile);

/**
 * One engine the agent can run. The catalogue is configuration: operators map each engine id
 * `mysql/<version>` to a Docker image (docker runtime) or a local server binary (process runtime).
 */
export interface CatalogueEntry {
  /** `mysql/<version>`. */
  id: string;
  engine: 'mysql';
  /** The server's true version, e.g. `10.11.19`. */
  version: string;
  /** Server binary (mariadbd/mysqld) for the process runtime. */
  binary?: string;
  /** Image reference for the docker runtime. */
  image?: string;
}

export type Catalogue = CatalogueEntry[];

/** Extracts `10.11.19` from `mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu`. */
export function parseServerVersion(output: string): string | undefined {
  const m = /\bVer\s+(\d+\.\d+\.\d+)/.exec(output);
  return m?.[1];
}

/** The lab default: every local server binary found, under its true version. */
export async function detectLocalCatalogue(
  candidates: string[] = ['/usr/sbin/mariadbd', '/usr/sbin/mysqld', '/usr/local/bin/mariadbd'],
): Promise<Catalogue> {
  const out: Catalogue = [];
  const seen = new Set<string>();
  for (const binary of candidates) {
    if (!existsSync(binary)) continue;
    try {
      const { stdout } = await run(binary, ['--version'], { timeout: 10_000 });
      const version = parseServerVersion(stdout);
      // The agent's replication, semi-sync, encryption and account SQL is MariaDB's; a MySQL
      // server binary is not offered (docs/agent.md §8).
      if (!version || seen.has(version) || !/MariaDB/i.test(stdout)) continue;
      seen.add(version);
      out.push({ id: `mysql/${version}`, engine: 'mysql', version, binary });
    } catch {
      // A broken binary is simply not offered.
    }
  }
  return out;
}

/**
 * The agent operator's own engine file (`fulcrum agent --engines FILE`): `[{id, binary?, image?}]`,
 * e.g. a newer build to patch to. Listed ahead of the detected servers; a broken file is an error
 * at start, never a silent fallback.
 */
export function loadCatalogueFile(path: string): Catalogue {
  const raw = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  if (!Array.isArray(raw)) throw new Error(`${path}: expected a JSON array of engines`);
  return raw.map((e, i) => {
    const m = /^mysql\/([0-9][0-9A-Za-z.+_-]{0,40})$/.exec(typeof e?.id === 'string' ? e.id : '');
    if (!m) throw new Error(`${path}[${i}].id: expected mysql/<version>`);
    const binary = typeof e.binary === 'string' && e.binary ? e.binary : undefined;
    const image = typeof e.image === 'string' && e.image ? e.image : undefined;
    if (!binary && !image) throw new Error(`${path}[${i}]: expected a binary or an image`);
    return { id: e.id as string, engine: 'mysql' as const, version: m[1]!, ...(binary ? { binary } : {}), ...(image ? { image } : {}) };
  });
}

/**
 * Finds the entry for a desired database: by binary/image when given, else by engine id. Only
 * this agent's own catalogue runs (docs/security/secrets.md, "Engines"): a binary or image the
 * desired state names that the catalogue does not list for that engine id is refused, whoever
 * sent it, before anything is started.
 */
export function resolveEngine(
  catalogue: Catalogue,
  want: { engineId: string; binary?: string; image?: string },
  runtime: 'process' | 'docker',
): CatalogueEntry {
  const byId = catalogue.filter((e) => e.id === want.engineId);
  const refuse = (what: string) => new FulcrumError('invalid_config', `${what} is not in this agent's catalogue for engine ${want.engineId}; refusing to run it`, { field: 'engine' });
  // The process runtime runs a binary, docker an image; either way only one this catalogue lists.
  const key = runtime === 'process' ? 'binary' : 'image';
  const asked = want[key];
  if (asked) {
    const exact = byId.find((e) => e[key] === asked);
    if (!exact) throw refuse(`${key} ${asked}`);
    return exact;
  }
  const hit = byId.find((e) => e[key]);
  if (hit) return hit;
  throw new FulcrumError('invalid_config', `engine ${want.engineId} is not in this agent's catalogue`, { field: 'engine' });
}
