/**
 * Picking the MariaDB series a database test means. An agent offers every engine it can run: a
 * docker agent one per locally built image (scripts/build-mysql-image.sh builds 10.11 and 11.8),
 * so "the first engine offered" depends on which images this machine happens to hold. A test
 * names its series and checks the server it got runs it.
 */

/** The series a test runs on unless it is about a version change (the process runtime's too). */
export const DEFAULT_SERIES = '10.11';

export interface OfferedEngine {
  id: string;
  version: string;
}

/** The id of the engine of `series` (e.g. "10.11") among those offered; throws, listing them, if none. */
export function engineOfSeries(engines: readonly OfferedEngine[], series: string = DEFAULT_SERIES): string {
  const e = engines.find((x) => x.version.startsWith(`${series}.`));
  if (!e) throw new Error(`no MariaDB ${series} engine offered: ${JSON.stringify(engines)}`);
  return e.id;
}

/** The running server's VERSION(), e.g. "10.11.18-MariaDB-log", over any mysql2 connection. */
export async function serverVersion(c: { query: (sql: string) => Promise<unknown> }): Promise<string> {
  const [rows] = (await c.query('SELECT VERSION() AS v')) as [{ v: unknown }[]];
  return String(rows[0]?.v);
}

/** Matches a version of `series`: "10.11" matches "10.11.18" and "10.11.18-MariaDB-log", not "10.1.48". */
export function seriesPattern(series: string): RegExp {
  return new RegExp(`^${series.replace(/\./g, '\\.')}\\.`);
}
