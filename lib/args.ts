import { parseArgs } from 'node:util';

/**
 * `--flag value` / `--flag=value` / `--switch` flags for the `fulcrum` CLI and the benches, read by
 * node:util's parseArgs from one spec per command, which also writes the command's usage lines.
 * Unknown flags are errors, so a typo never silently falls back to a default.
 */
export type FlagKind = 'string' | 'number' | 'boolean';

/** One flag: its kind and, for the usage, what its value is and what it does. */
export interface Flag {
  kind: FlagKind;
  /** The value's placeholder in the usage (`DIR`, `HOST:PORT`); `N` for numbers and `VALUE` when left out. */
  arg?: string;
  /** What the flag does, a short phrase for the usage. */
  help?: string;
  /** The value when the flag is not given: parseFlags fills it in, and the usage shows it. */
  default?: string | number;
  /** A default the command works out itself (the number of cores, the last run's port), as the usage says it. */
  defaultText?: string;
}

/** Flag name (without the dashes) -> its kind, or the whole flag. */
export interface FlagSpec {
  [name: string]: FlagKind | Flag;
}

export type Flags = Record<string, string | number | boolean | undefined>;

export function flagKind(f: FlagKind | Flag): FlagKind {
  return typeof f === 'string' ? f : f.kind;
}

/** Parses `argv` by `spec`; every flag with a default is set. Errors name the flag. */
export function parseFlags(argv: string[], spec: FlagSpec): Flags {
  const options = Object.fromEntries(Object.entries(spec).map(([name, f]) => [name, { type: flagKind(f) === 'boolean' ? 'boolean' as const : 'string' as const }]));
  // Not strict: the errors are ours (the same texts whatever Node's version), and a value that
  // starts with a dash (`--state -x`) is taken as a value, as before parseArgs.
  const { tokens } = parseArgs({ args: argv, options, strict: false, allowPositionals: true, tokens: true });
  const out: Flags = {};
  for (const t of tokens) {
    if (t.kind === 'positional') throw new Error(`unexpected argument: ${t.value}`);
    if (t.kind === 'option-terminator') throw new Error('unknown option --');
    if (!t.rawName.startsWith('--')) throw new Error(`unexpected argument: ${argv[t.index]}`);
    const f = Object.hasOwn(spec, t.name) ? spec[t.name] : undefined;
    if (!f) throw new Error(`unknown option --${t.name}`);
    const kind = flagKind(f);
    if (kind === 'boolean') {
      out[t.name] = t.inlineValue !== true || t.value !== 'false';
      continue;
    }
    if (t.value === undefined) throw new Error(`--${t.name} needs a value`);
    if (kind === 'number') {
      const n = Number(t.value);
      if (!Number.isInteger(n) || n < 0) throw new Error(`--${t.name} must be a non-negative integer`);
      out[t.name] = n;
    } else out[t.name] = t.value;
  }
  for (const [name, f] of Object.entries(spec)) if (typeof f !== 'string' && f.default !== undefined) out[name] ??= f.default;
  return out;
}

/**
 * The usage lines of `spec`, one flag each: `--name ARG   help (default D)`, indented by
 * `indent`, the help in one column.
 */
export function flagUsage(spec: FlagSpec, indent = '    '): string[] {
  const heads = Object.entries(spec).map(([name, f]) => {
    const kind = flagKind(f);
    const arg = kind === 'boolean' ? '' : ` ${(typeof f === 'string' ? undefined : f.arg) ?? (kind === 'number' ? 'N' : 'VALUE')}`;
    return `--${name}${arg}`;
  });
  const width = Math.max(0, ...heads.map((h) => h.length)) + 2;
  return Object.values(spec).map((f, i) => {
    const head = heads[i]!;
    if (typeof f === 'string') return `${indent}${head}`;
    const dflt = f.defaultText ?? (f.default === undefined ? undefined : String(f.default));
    const help = [f.help, dflt === undefined ? undefined : `(default ${dflt})`].filter(Boolean).join(' ');
    return help === '' ? `${indent}${head}` : `${indent}${head.padEnd(width)}${help}`;
  });
}
