/**
 * A small `--flag value` / `--flag=value` / `--switch` parser for the `fulcrum` CLI. Unknown
 * flags are errors, so a typo never silently falls back to a default.
 */
export interface FlagSpec {
  [name: string]: 'string' | 'number' | 'boolean';
}

export function parseFlags(argv: string[], spec: FlagSpec): Record<string, string | number | boolean | undefined> {
  const out: Record<string, string | number | boolean | undefined> = {};
  for (let i = 0; i < argv.length; i++) {
    const arg = argv[i]!;
    if (!arg.startsWith('--')) throw new Error(`unexpected argument: ${arg}`);
    const eq = arg.indexOf('=');
    const name = arg.slice(2, eq === -1 ? undefined : eq);
    const kind = spec[name];
    if (!kind) throw new Error(`unknown option --${name}`);
    if (kind === 'boolean') {
      out[name] = eq === -1 ? true : arg.slice(eq + 1) !== 'false';
      continue;
    }
    const value = eq === -1 ? argv[++i] : arg.slice(eq + 1);
    if (value === undefined) throw new Error(`--${name} needs a value`);
    if (kind === 'number') {
      const n = Number(value);
      if (!Number.isInteger(n) || n < 0) throw new Error(`--${name} must be a non-negative integer`);
      out[name] = n;
    } else out[name] = value;
  }
  return out;
}
