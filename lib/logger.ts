import { writeSync } from 'node:fs';
import { pino, stdSerializers, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/**
 * The part of a server error message that quotes the statement ("... syntax to use near
 * 'IDENTIFIED BY 'secret'' at line 1"): the quoted text may be any part of it, a password too.
 */
const QUOTED_SQL = /near '[\s\S]*' at line \d+/g;
/**
 * A replica's SQL-thread error quotes the whole statement it failed to apply ("... on query.
 * Default database: 'd'. Query: 'ALTER USER ... IDENTIFIED BY ...'").
 */
const QUOTED_QUERY = /Query: '[\s\S]*'/g;

/**
 * A message or stack with the statement text a server error quotes taken out. Used for logs and
 * for every error text the agent sends the control plane (operation results, a node's last
 * error), which the control plane stores and shows in events and statuses.
 */
export function withoutStatementText(text: string): string {
  return text.replace(QUOTED_SQL, "near '[redacted]' at line ?").replace(QUOTED_QUERY, "Query: '[redacted]'");
}
const scrubSql = withoutStatementText;

/**
 * How every logger writes an `err`: pino's standard error serializer, without what a database
 * driver's error carries of the statement. mysql2 sets `sql` to the statement as sent, with its
 * values filled in (`ALTER USER ... IDENTIFIED BY 'password'`), and the server's message may quote
 * part of it: both once reached the agent's logs (docs/security/secrets.md).
 */
export function errForLog(err: unknown): unknown {
  if (typeof err === 'string') return scrubSql(err);
  const out = stdSerializers.err(err as Error) as unknown;
  if (out === null || typeof out !== 'object') return out;
  return scrubSerialized(out as Record<string, unknown>);
}

function scrubSerialized(o: Record<string, unknown>): Record<string, unknown> {
  delete o.sql;
  for (const k of ['message', 'stack', 'sqlMessage']) if (typeof o[k] === 'string') o[k] = scrubSql(o[k] as string);
  // Nested errors (aggregates, errors kept under another key) were serialized the same way.
  for (const v of Object.values(o)) {
    if (Array.isArray(v)) for (const x of v) if (x && typeof x === 'object') scrubSerialized(x as Record<string, unknown>);
    if (v && typeof v === 'object' && !Array.isArray(v) && 'stack' in v) scrubSerialized(v as Record<string, unknown>);
  }
  return o;
}

/**
 * One root logger per process; components take `root.child({ component })`.
 * Secrets (tokens, passwords, keys) are redacted wherever they appear in a log line.
 */
export function createLogger(name: string, opts: { level?: string; destination?: number | string | DestinationStream; onLost?: (err: Error) => void } = {}): Logger {
  const options: LoggerOptions = {
    name,
    level: opts.level ?? process.env.FULCRUM_LOG_LEVEL ?? 'info',
    redact: {
      paths: [
        'token', '*.token', 'password', '*.password', 'root_password', '*.root_password',
        'ssl_key', '*.ssl_key', 'backupKey', '*.backupKey', 'forkSourceKey', '*.forkSourceKey', 'req.headers.authorization', 'headers.authorization', 'authorization',
      ],
      censor: '[redacted]',
    },
    serializers: { err: errForLog },
  };
  // A stream as given (e.g. pino.multistream: warnings to a file, everything to stderr).
  if (typeof opts.destination === 'object') return pino(options, opts.destination);
  // stdout unless told otherwise, as pino's default. pino listens to its stream's errors only for
  // a broken pipe and re-emits any other, which with nothing listening ends the process: an agent
  // logging to a full disk would stop serving its databases for want of a log line.
  const dest = pino.destination(opts.destination ?? 1);
  let said = false;
  const lost = opts.onLost ?? ((err: Error) => sayOnStderr(`${name}: log lines are being lost: ${err.message}\n`));
  dest.on('error', (err: Error) => {
    if (said) return;
    said = true;
    lost(err);
  });
  return pino(options, dest);
}

/**
 * Writes `text` to stderr for an operator, outside the logger (a daemon's stop and reload notes).
 * A stderr that is gone (a broken pipe: the journal restarted, the lab that read it stopped)
 * loses the text; process.stderr would emit 'error', and with nothing listening end the process.
 */
export function sayOnStderr(text: string): void {
  try {
    writeSync(2, text);
  } catch {
    // Nowhere is left to say it.
  }
}

/** A logger that drops everything, for unit tests. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
