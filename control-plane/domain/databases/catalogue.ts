import { execFile } from 'node:child_process';
import { existsSync, readFileSync, statSync } from 'node:fs';
import { promisify } from 'node:util';

const run = promisify(execFile);

/** One engine the service offers: id `mysql/<version>` mapped to what runs it. */
export interface EngineEntry {
  id: string;
  engine: 'mysql';
  version: string;
  /** Docker image (docker runtime) or server binary (process runtime); either may be empty. */
  image: string;
  binary: string;
}

/**
 * The engine catalogue is the operator's configuration (docs/security/secrets.md, "Engines"):
 * 1. the operator's file `<stateDir>/database-engines.json` (`[{id, image?, binary?}]`), if any;
 * 2. else the lab default: local server binaries found on this host, under their true version,
 *    plus the engine ids the connected agents report they can run. An agent names versions
 *    only: its entries carry no image or binary, so each agent runs its own local server for
 *    them, and no agent can choose the software another host runs.
 * A MariaDB server is offered under engine `mysql` (clients only know mysql/postgresql) with
 * its true version, e.g. `mysql/10.11.14`; a 10.x version cannot be confused with MySQL.
 */
export class EngineCatalogue {
  constructor(
    private readonly configured: () => EngineEntry[],
    private readonly detected: EngineEntry[],
    private readonly reportedIds: () => string[],
  ) {}

  list(): EngineEntry[] {
    const configured = this.configured();
    const out = new Map<string, EngineEntry>();
    if (configured.length > 0) {
      for (const e of configured) if (!out.has(e.id)) out.set(e.id, e);
    } else {
      for (const e of this.detected) if (!out.has(e.id)) out.set(e.id, e);
      for (const id of this.reportedIds()) {
        const parsed = parseEngineId(id);
        if (parsed && !out.has(id)) out.set(id, { id, engine: 'mysql', version: parsed.version, image: '', binary: '' });
      }
    }
    return [...out.values()].sort((a, b) => a.id.localeCompare(b.id, undefined, { numeric: true }));
  }

  get(id: string): EngineEntry | undefined {
    return this.list().find((e) => e.id === id);
  }

  /**
   * The entry a client's `version` names: the exact version, or for a series (`11.8`, as clients
   * write a major version) its newest build in the catalogue, among the entries `usable` keeps.
   */
  forVersion(version: string, usable: (id: string) => boolean = () => true): EngineEntry | undefined {
    const all = this.list().filter((e) => usable(e.id));
    return all.find((e) => e.version === version) ?? all.filter((e) => e.version.startsWith(`${version}.`)).at(-1);
  }

  /**
   * A create's body with its `engine` as the catalogue id it names: itself, or for a series id
   * (`mysql/10`, as the v2 Terraform resource writes the real service's `mysql/8`, and reads it
   * back as `<engine>/<major>`) the newest build of that series on offer. Anything else is left
   * as given, for validation to refuse.
   */
  exactEngineIn<T>(body: T): T {
    if (!body || typeof body !== 'object' || !('engine' in body)) return body;
    const engine = (body as { engine: unknown }).engine;
    if (typeof engine !== 'string' || this.get(engine)) return body;
    const parsed = parseEngineId(engine);
    const exact = parsed && this.forVersion(parsed.version)?.id;
    return exact ? { ...body, engine: exact } : body;
  }
}

/** Parses an engine id; undefined unless it is `mysql/<version>`. */
export function parseEngineId(id: string): { engine: 'mysql'; version: string } | undefined {
  const m = /^mysql\/([0-9][0-9A-Za-z.+_-]{0,40})$/.exec(id);
  return m ? { engine: 'mysql', version: m[1]! } : undefined;
}

/** Reads the operator's engine file; a missing file is an empty list, a broken one an error. */
function loadConfiguredEngines(path: string): EngineEntry[] {
  if (!existsSync(path)) return [];
  const raw = JSON.parse(readFileSync(path, 'utf8')) as unknown;
  if (!Array.isArray(raw)) throw new Error(`${path}: expected a JSON array of engines`);
  return raw.map((e, i) => {
    const id = typeof e?.id === 'string' ? e.id : '';
    const parsed = parseEngineId(id);
    if (!parsed) throw new Error(`${path}[${i}].id: expected mysql/<version>`);
    return { id, engine: 'mysql', version: parsed.version, image: String(e.image ?? ''), binary: String(e.binary ?? '') };
  });
}

/**
 * The operator's file, re-read when it changes: a new image or binary for an engine id is a
 * patch, applied to each database in its maintenance window (or at once with POST .../patch).
 * A file that stops parsing keeps the last good list.
 */
export function watchedEngines(path: string): () => EngineEntry[] {
  let mtime = -1;
  let last: EngineEntry[] = loadConfiguredEngines(path);
  return () => {
    let m = 0;
    try {
      m = statSync(path).mtimeMs;
    } catch {
      m = 0;
    }
    if (m !== mtime) {
      mtime = m;
      try {
        last = m === 0 ? [] : loadConfiguredEngines(path);
      } catch {
        // Keep serving the last good catalogue.
      }
    }
    return last;
  };
}

/** `mariadbd  Ver 10.11.14-MariaDB-0+deb12u2 for ...` -> `10.11.14`. */
function serverVersion(output: string): string | undefined {
  return /\bVer\s+(\d+\.\d+\.\d+)/.exec(output)?.[1];
}

/** The lab default: every local mariadbd/mysqld binary, under its true version. */
export async function detectLocalEngines(
  candidates: string[] = ['/usr/sbin/mariadbd', '/usr/sbin/mysqld', '/usr/local/bin/mariadbd'],
): Promise<EngineEntry[]> {
  const out: EngineEntry[] = [];
  for (const binary of candidates) {
    if (!existsSync(binary)) continue;
    try {
      const { stdout } = await run(binary, ['--version'], { timeout: 10_000 });
      const version = serverVersion(stdout);
      if (version && !out.some((e) => e.version === version)) out.push({ id: `mysql/${version}`, engine: 'mysql', version, image: '', binary });
    } catch {
      // A binary that does not run is not offered.
    }
  }
  return out;
}
