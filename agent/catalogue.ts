import { execFile } from 'node:child_process';
import { existsSync } from 'node:fs';
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

/** Finds the entry for a desired database: by binary/image when given, else by engine id. */
export function resolveEngine(
  catalogue: Catalogue,
  want: { engineId: string; binary?: string; image?: string },
  runtime: 'process' | 'docker',
): CatalogueEntry {
  const byId = catalogue.filter((e) => e.id === want.engineId);
  if (runtime === 'process') {
    const exact = want.binary ? byId.find((e) => e.binary === want.binary) ?? (existsSync(want.binary) ? { ...byId[0]!, binary: want.binary } : undefined) : undefined;
    const hit = exact ?? byId.find((e) => e.binary);
    if (hit?.binary) return hit;
  } else {
    const hit = want.image ? { ...(byId[0] ?? { id: want.engineId, engine: 'mysql' as const, version: want.engineId.split('/')[1] ?? '' }), image: want.image } : byId.find((e) => e.image);
    if (hit?.image) return hit;
  }
  throw new FulcrumError('invalid_config', `engine ${want.engineId} is not in this agent's catalogue`, { field: 'engine' });
}
