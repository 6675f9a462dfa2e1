/**
 * `--config FILE` for the per-process commands (docs/install.md, "Config files"): `key = value`
 * lines whose keys are the command's flag names without the dashes. The file's settings come
 * first and the command line's flags after them, so a flag on the command line wins.
 */
import { readFileSync, statSync } from 'node:fs';
import { flagKind, parseFlags, type FlagSpec, type Flags } from './args.js';

/** Keys whose value is itself a secret (not a path to one): the file holding them must be private. */
const SECRET_KEYS = new Set(['join', 'backup-store-secret-access-key']);

/**
 * A URL with a user or password in it (`store = postgres://user:password@host/db`) carries a
 * credential whatever its key, so it makes the file a secret file too.
 */
function hasUserinfo(value: string): boolean {
  if (!/^[a-z][a-z0-9+.-]*:\/\//i.test(value)) return false;
  try {
    const u = new URL(value);
    return u.username !== '' || u.password !== '';
  } catch {
    // Not parsable as a URL: an '@' before the host part still counts, to err on the safe side.
    return /^[a-z][a-z0-9+.-]*:\/\/[^/?#]*@/i.test(value);
  }
}

/** A config file larger than this is a mistake (every setting fits in a few hundred bytes). */
const MAX_BYTES = 64 * 1024;

/**
 * Reads a config file into `--key=value` arguments for `spec`. Errors name the file, the line and
 * the key. Refused: unknown keys, a key given twice, a file anyone but its owner may write (it
 * decides which key files the process opens), and a file others may read when it holds a secret
 * (a secret key, or any URL with a user or password in it).
 */
export function configFileArgs(path: string, spec: FlagSpec): string[] {
  const st = statSync(path);
  if (!st.isFile()) throw new Error(`--config ${path}: not a regular file`);
  if (st.size > MAX_BYTES) throw new Error(`--config ${path}: larger than ${MAX_BYTES} bytes`);
  if (st.mode & 0o022) throw new Error(`--config ${path}: writable by group or others (chmod go-w ${path})`);
  const args: string[] = [];
  const seen = new Set<string>();
  const lines = readFileSync(path, 'utf8').split(/\r?\n/);
  lines.forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const where = `--config ${path} line ${i + 1}`;
    const eq = line.indexOf('=');
    if (eq === -1) throw new Error(`${where}: expected key = value`);
    const key = line.slice(0, eq).trim();
    let value = line.slice(eq + 1).trim();
    if (/^".*"$/.test(value)) value = value.slice(1, -1);
    if (key === 'config') throw new Error(`${where}: a config file cannot name another one`);
    if (!Object.hasOwn(spec, key)) throw new Error(`${where}: unknown key "${key}"`);
    if (seen.has(key)) throw new Error(`${where}: "${key}" is set twice`);
    seen.add(key);
    if (value === '') throw new Error(`${where}: "${key}" has no value`);
    if (flagKind(spec[key]!) === 'boolean' && value !== 'true' && value !== 'false') throw new Error(`${where}: "${key}" must be true or false`);
    const secret = SECRET_KEYS.has(key) ? 'a secret' : hasUserinfo(value) ? 'a URL with a user or password in it' : undefined;
    if (secret && st.mode & 0o044) {
      throw new Error(`--config ${path}: holds "${key}", ${secret}, but group or others may read it (chmod 600 ${path})`);
    }
    try {
      parseFlags([`--${key}=${value}`], spec);
    } catch (err) {
      throw new Error(`${where}: ${(err as Error).message}`);
    }
    args.push(`--${key}=${value}`);
  });
  return args;
}

/**
 * parseFlags with `--config FILE`: the file's settings, then the command line's (which win).
 * Secret values are better kept out of the command line, where `ps` shows them to every user.
 */
export function parseFlagsWithConfig(argv: string[], spec: FlagSpec): Flags {
  const { config } = parseFlags(argv.filter((_, i) => isConfigArg(argv, i)), { config: 'string' });
  const rest = argv.filter((_, i) => !isConfigArg(argv, i));
  const fromFile = typeof config === 'string' ? configFileArgs(config, spec) : [];
  return parseFlags([...fromFile, ...rest], spec);
}

/** True for `--config FILE`'s two words and for `--config=FILE`. */
function isConfigArg(argv: string[], i: number): boolean {
  const a = argv[i]!;
  if (a === '--config' || a.startsWith('--config=')) return true;
  return i > 0 && argv[i - 1] === '--config';
}
