import { createCipheriv, createDecipheriv, randomBytes } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname } from 'node:path';

/**
 * Envelope encryption of secrets at rest (docs/security/secrets.md): each secret value is sealed
 * with AES-256-GCM under a key-encryption key (KEK) kept in a key file apart from the database.
 * A sealed value names the key that sealed it, so a rotation can re-seal values one by one while
 * both keys are in the file. The context (e.g. `databases.root_password`) is bound as additional
 * authenticated data: a sealed value copied into another column does not open.
 */
const PREFIX = 'fkek1';
const KEY_BYTES = 32;
const IV_BYTES = 12;
const TAG_BYTES = 16;
const ID_RE = /^[a-z0-9]{1,32}$/;

export interface KeyEntry {
  id: string;
  key: Buffer;
}

/** Parses a key file: one `<id> <base64 of 32 bytes>` a line, `#` comments; the last key is active. */
export function parseKeyFile(text: string, path: string): KeyEntry[] {
  const out: KeyEntry[] = [];
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#')) return;
    const [id, b64, extra] = line.split(/\s+/);
    const key = Buffer.from(b64 ?? '', 'base64');
    if (!id || !ID_RE.test(id) || key.length !== KEY_BYTES || extra !== undefined) {
      throw new Error(`${path}:${i + 1}: expected "<id> <base64 of ${KEY_BYTES} bytes>"`);
    }
    out.push({ id, key });
  });
  if (out.length === 0) throw new Error(`${path}: no key`);
  return out;
}

/** Writes the key file atomically with mode 0600 in a 0700 folder. */
export function writeKeyFile(path: string, keys: KeyEntry[]): void {
  mkdirSync(dirname(path), { recursive: true, mode: 0o700 });
  const body = [
    '# Fulcrum key-encryption keys (docs/security/secrets.md). The last key seals new secrets;',
    '# earlier ones only open values not yet re-sealed. Keep this file apart from backups of the database.',
    ...keys.map((k) => `${k.id} ${k.key.toString('base64')}`),
    '',
  ].join('\n');
  const tmp = `${path}.tmp`;
  writeFileSync(tmp, body, { mode: 0o600 });
  chmodSync(tmp, 0o600);
  renameSync(tmp, path);
}

/** A fresh key with a short random id. */
export function newKey(): KeyEntry {
  return { id: randomBytes(6).toString('hex'), key: randomBytes(KEY_BYTES) };
}

export class SecretBox {
  private keys: KeyEntry[];
  private mtime = -1;

  /**
   * `file` (optional) is re-read when it changes, so that a control plane keeps working while
   * `fulcrum kek rotate` adds a key and re-seals the store.
   */
  constructor(keys: KeyEntry[], private readonly file?: string) {
    if (keys.length === 0) throw new Error('a secret box needs at least one key');
    this.keys = keys;
    if (file) this.mtime = mtimeOf(file);
  }

  /** The id of the key that seals new values. */
  get activeId(): string {
    return this.keys[this.keys.length - 1]!.id;
  }

  static isSealed(value: string): boolean {
    return value.startsWith(`${PREFIX}:`);
  }

  /** The id of the key a sealed value names (undefined for a plain value). */
  static keyIdOf(value: string): string | undefined {
    return SecretBox.isSealed(value) ? value.split(':')[1] : undefined;
  }

  seal(plain: string, context: string): string {
    this.reloadIfChanged();
    const k = this.keys[this.keys.length - 1]!;
    const iv = randomBytes(IV_BYTES);
    const c = createCipheriv('aes-256-gcm', k.key, iv);
    c.setAAD(Buffer.from(context));
    const body = Buffer.concat([iv, c.update(plain, 'utf8'), c.final(), c.getAuthTag()]);
    return `${PREFIX}:${k.id}:${body.toString('base64')}`;
  }

  /** Opens a sealed value; a plain value (written before encryption existed) is returned as is. */
  open(stored: string, context: string): string {
    if (!SecretBox.isSealed(stored)) return stored;
    const [, id, b64] = stored.split(':');
    let k = this.keys.find((x) => x.id === id);
    if (!k && this.reloadIfChanged()) k = this.keys.find((x) => x.id === id);
    if (!k) throw new Error(`a secret is sealed with key ${id}, which is not in the key file${this.file ? ` ${this.file}` : ''}`);
    const body = Buffer.from(b64 ?? '', 'base64');
    if (body.length < IV_BYTES + TAG_BYTES) throw new Error(`a secret sealed with key ${id} is truncated`);
    const d = createDecipheriv('aes-256-gcm', k.key, body.subarray(0, IV_BYTES));
    d.setAAD(Buffer.from(context));
    d.setAuthTag(body.subarray(body.length - TAG_BYTES));
    try {
      return Buffer.concat([d.update(body.subarray(IV_BYTES, body.length - TAG_BYTES)), d.final()]).toString('utf8');
    } catch {
      throw new Error(`a secret sealed with key ${id} does not open for ${context} (altered, or moved from another column)`);
    }
  }

  sealNullable(plain: string | null | undefined, context: string): string | null {
    return plain === null || plain === undefined ? null : this.seal(plain, context);
  }

  openNullable(stored: string | null | undefined, context: string): string | null {
    return stored === null || stored === undefined ? null : this.open(stored, context);
  }

  /** Re-reads the key file when its modification time changed; true when it did. */
  private reloadIfChanged(): boolean {
    if (!this.file) return false;
    const m = mtimeOf(this.file);
    if (m === this.mtime || m < 0) return false;
    this.keys = parseKeyFile(readFileSync(this.file, 'utf8'), this.file);
    this.mtime = m;
    return true;
  }
}

function mtimeOf(path: string): number {
  try {
    return statSync(path).mtimeMs;
  } catch {
    return -1;
  }
}

/** Opens the key file at `path`, creating it with one fresh key (mode 0600) when it is missing. */
export function loadOrCreateKeyFile(path: string): SecretBox {
  if (!existsSync(path)) writeKeyFile(path, [newKey()]);
  chmodSync(path, 0o600);
  return new SecretBox(parseKeyFile(readFileSync(path, 'utf8'), path), path);
}
