import { Counter, type Registry } from 'prom-client';
import type { Clock } from '../../lib/clock.js';
import { FulcrumError } from '../../lib/errors.js';
import { clientKey, DEFAULT_CLIENT_IPV6_PREFIX } from '../../lib/client-key.js';
import { apiReasons } from './errors.js';

/**
 * Requests per window the API allows (docs/security/api.md, docs/api.md). The defaults are the
 * real service's published figures: 400 per minute for a token, 50 per minute on `/stats`; a
 * client address gets 1600 per minute (the real service's 2025 figure), so several tokens behind
 * one address are not starved by the address limit while a stream of guessed tokens is cut off.
 * 0 turns a limit off.
 */
export interface RateLimitSettings {
  perToken: number;
  /** Per token, for `GET /nodebalancers/{id}/stats`, counted apart from the token's other calls. */
  stats: number;
  perIp: number;
  /**
   * `perIp` counts a client key (lib/client-key.ts): an IPv6 client by this prefix, since one host
   * routinely holds a whole /64 and would otherwise be 2^64 clients.
   */
  ipv6Prefix: number;
  windowMs: number;
  /** Most keys each table remembers; the least recently seen go first when it is full. */
  maxKeys: number;
}

export const defaultRateLimits: RateLimitSettings = { perToken: 400, stats: 50, perIp: 1600, ipv6Prefix: DEFAULT_CLIENT_IPV6_PREFIX, windowMs: 60_000, maxKeys: 10_000 };

/** The state of one key's window after a request: what the `X-RateLimit-*` headers report. */
export interface RateVerdict {
  allowed: boolean;
  limit: number;
  remaining: number;
  /** When the window ends (ms since the epoch). */
  resetAt: number;
}

/**
 * Fixed windows per key in a bounded map. Map order is recency (a key is re-inserted when used),
 * so when the table is full the least recently seen key is dropped: a client rotating source
 * addresses or tokens costs at most `maxKeys` entries, never unbounded memory.
 */
export class WindowTable {
  private readonly windows = new Map<string, { start: number; count: number }>();

  constructor(
    private readonly limit: number,
    private readonly windowMs: number,
    private readonly maxKeys: number,
  ) {}

  get size(): number {
    return this.windows.size;
  }

  take(key: string, now: number): RateVerdict {
    let w = this.windows.get(key);
    if (w) this.windows.delete(key);
    if (!w || now >= w.start + this.windowMs) w = { start: now, count: 0 };
    this.windows.set(key, w);
    while (this.windows.size > this.maxKeys) this.windows.delete(this.windows.keys().next().value!);
    const allowed = w.count < this.limit;
    if (allowed) w.count++;
    return { allowed, limit: this.limit, remaining: this.limit - w.count, resetAt: w.start + this.windowMs };
  }
}

export type RateTier = 'general' | 'stats';

/**
 * The API's rate limits: one table of client addresses (checked on every request, before the
 * token is looked at) and one per token tier (checked once the token is known). The verdict the
 * headers report is the one closest to refusing, so `X-RateLimit-Remaining` never promises
 * more than the next request gets.
 */
export class RateLimiter {
  readonly settings: RateLimitSettings;
  private readonly ip?: WindowTable;
  private readonly tokens: Partial<Record<RateTier, WindowTable>> = {};
  private readonly refused: Counter<'key'>;

  constructor(private readonly clock: Clock, registry: Registry, settings: Partial<RateLimitSettings> = {}) {
    const s = (this.settings = { ...defaultRateLimits, ...settings });
    if (s.perIp > 0) this.ip = new WindowTable(s.perIp, s.windowMs, s.maxKeys);
    if (s.perToken > 0) this.tokens.general = new WindowTable(s.perToken, s.windowMs, s.maxKeys);
    if (s.stats > 0) this.tokens.stats = new WindowTable(s.stats, s.windowMs, s.maxKeys);
    this.refused = new Counter({
      name: 'fulcrum_api_rate_limited_total',
      help: 'API requests refused with 429, by the key whose limit was spent (ip or token)',
      labelNames: ['key'],
      registers: [registry],
    });
    this.refused.inc({ key: 'ip' }, 0);
    this.refused.inc({ key: 'token' }, 0);
  }

  /** Counts a request from `address` under its client key; undefined when addresses are not limited. */
  takeIp(address: string | undefined): RateVerdict | undefined {
    if (!this.ip) return undefined;
    const v = this.ip.take(clientKey(address ?? '', this.settings.ipv6Prefix), this.clock.now());
    if (!v.allowed) this.refused.inc({ key: 'ip' });
    return v;
  }

  takeToken(tokenId: number, tier: RateTier): RateVerdict | undefined {
    const table = this.tokens[tier];
    if (!table) return undefined;
    const v = table.take(String(tokenId), this.clock.now());
    if (!v.allowed) this.refused.inc({ key: 'token' });
    return v;
  }

  /** The 429 to throw for a refused verdict. */
  static tooMany(): FulcrumError {
    return new FulcrumError('rate_limited', apiReasons.rateLimited);
  }

  /** The `X-RateLimit-*` (and, when refused, `Retry-After`) headers of a verdict. */
  headers(v: RateVerdict): Record<string, string> {
    const h: Record<string, string> = {
      'x-ratelimit-limit': String(v.limit),
      'x-ratelimit-remaining': String(v.remaining),
      'x-ratelimit-reset': String(Math.ceil(v.resetAt / 1000)),
    };
    if (!v.allowed) h['retry-after'] = String(Math.max(1, Math.ceil((v.resetAt - this.clock.now()) / 1000)));
    return h;
  }
}

/** Of two verdicts, the one to report: a refusal, else the one with fewer requests left. */
export function tighter(a: RateVerdict | undefined, b: RateVerdict | undefined): RateVerdict | undefined {
  if (!a || !b) return a ?? b;
  if (a.allowed !== b.allowed) return a.allowed ? b : a;
  return b.remaining <= a.remaining ? b : a;
}
