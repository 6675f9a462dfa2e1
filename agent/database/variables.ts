import { q, withAdmin } from '../mysql/admin.js';
import type { ClusterContext } from './context.js';

export type VariablesContext = Pick<ClusterContext, 'adminTarget' | 'log' | 'emit'>;

const NAME = /^[a-z][a-z0-9_]*$/;

/** Digits go bare (numeric variables refuse a quoted value, and may exceed a double); anything else quoted. */
const sqlLiteral = (v: string, escape: (s: string) => string): string => (/^\d{1,20}$/.test(v) ? v : escape(v));

/**
 * The dynamic part of engine_config (docs/databases.md, "engine_config"): variables set with SET
 * GLOBAL on every running node, without a restart. They are not in the server configuration (a
 * change there would restart the nodes), so a node that starts again runs with the defaults until
 * the next observation finds the difference and sets them again, a few seconds.
 *
 * The server normalises what it is given (sql_mode lists, ON read back as 1), so "current" means:
 * the node reads back what it read back right after it was set to the desired value. A value
 * the server refuses is reported once as a failed event and not retried until it changes.
 */
export class DynamicVariables {
  /** name -> the desired value and what the server read back after it was set. */
  private readonly seen = new Map<string, { want: string; got: string }>();
  /** name -> the desired value the server refused. */
  private readonly refused = new Map<string, string>();

  private wanted(desired: Record<string, string>): [string, string][] {
    return Object.entries(desired).filter(([name, v]) => NAME.test(name) && this.refused.get(name) !== v);
  }

  /** Names set earlier that are no longer desired: they go back to the server's default. */
  private dropped(desired: Record<string, string>): string[] {
    return [...this.seen.keys()].filter((name) => !(name in desired));
  }

  /** Whether every node in `nodes` holds the desired values. No SQL when there are none. */
  async current(db: VariablesContext, desired: Record<string, string>, nodes: number[]): Promise<boolean> {
    const want = this.wanted(desired);
    if (this.dropped(desired).length > 0) return false;
    if (want.length === 0) return true;
    for (const [name, v] of want) if (this.seen.get(name)?.want !== v) return false;
    const select = `SELECT ${want.map(([name], i) => `@@GLOBAL.${name} AS v${i}`).join(', ')}`;
    for (const k of nodes) {
      const row = await withAdmin(await db.adminTarget(k), async (c) => (await q(c, select))[0] ?? {});
      if (want.some(([name], i) => String(row[`v${i}`]) !== this.seen.get(name)!.got)) return false;
    }
    return true;
  }

  /** Sets the desired values on every node in `nodes` and resets dropped ones to their default. */
  async apply(db: VariablesContext, desired: Record<string, string>, nodes: number[]): Promise<void> {
    const dropped = this.dropped(desired);
    for (const k of nodes) {
      await withAdmin(await db.adminTarget(k), async (c) => {
        for (const name of dropped) await q(c, `SET GLOBAL ${name} = DEFAULT`).catch((err) => db.log.warn({ err, name }, 'reset to default failed'));
        for (const [name, v] of this.wanted(desired)) {
          try {
            await q(c, `SET GLOBAL ${name} = ${sqlLiteral(v, (x) => c.escape(x))}`);
            const row = (await q(c, `SELECT @@GLOBAL.${name} AS v`))[0];
            this.seen.set(name, { want: v, got: String(row?.v) });
          } catch (err) {
            this.refused.set(name, v);
            this.seen.delete(name);
            db.emit('database_update', `engine_config: the server refused ${name}=${v}: ${(err as Error).message}`, 'failed');
          }
        }
      });
    }
    for (const name of dropped) this.seen.delete(name);
    db.log.info({ variables: Object.keys(desired), nodes }, 'engine_config variables set');
  }
}
