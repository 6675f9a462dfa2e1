import { pino, type DestinationStream, type Logger, type LoggerOptions } from 'pino';

export type { Logger };

/**
 * One root logger per process; components take `root.child({ component })`.
 * Secrets (tokens, passwords, keys) are redacted wherever they appear in a log line.
 */
export function createLogger(name: string, opts: { level?: string; destination?: number | string | DestinationStream } = {}): Logger {
  const options: LoggerOptions = {
    name,
    level: opts.level ?? process.env.FULCRUM_LOG_LEVEL ?? 'info',
    redact: {
      paths: [
        'token', '*.token', 'password', '*.password', 'root_password', '*.root_password',
        'ssl_key', '*.ssl_key', 'req.headers.authorization', 'headers.authorization', 'authorization',
      ],
      censor: '[redacted]',
    },
  };
  // A stream as given (e.g. pino.multistream: warnings to a file, everything to stderr).
  if (typeof opts.destination === 'object') return pino(options, opts.destination);
  if (opts.destination !== undefined) return pino(options, pino.destination(opts.destination));
  return pino(options);
}

/** A logger that drops everything, for unit tests. */
export function silentLogger(): Logger {
  return pino({ level: 'silent' });
}
