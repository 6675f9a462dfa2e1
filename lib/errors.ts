/**
 * The one error type of the project. Every failure a caller may need to tell apart carries
 * a stable string `code`; the REST layer maps codes to HTTP statuses in one place
 * (control-plane/api/errors.ts), so domain code never thinks about status codes.
 */
export type ErrorCode =
  | 'invalid_token' // 401 Invalid Token
  | 'scope_missing' // 401: the token lacks the OAuth scope
  | 'forbidden' // 403: restricted user without the grant
  | 'not_found' // 404 Not found
  | 'validation' // 400 with one or more field errors
  | 'conflict' // 400: the state forbids the operation (never 409, clients do not expect it)
  | 'rate_limited' // 429
  | 'unavailable' // a dependency is away (used internally; mapped to 400 at the API edge)
  | 'invalid_config' // a snapshot or configuration that cannot be applied (NACK)
  | 'internal';

export interface FieldError {
  reason: string;
  field?: string;
}

export class FulcrumError extends Error {
  readonly code: ErrorCode;
  readonly errors: FieldError[];

  constructor(code: ErrorCode, reason: string | FieldError[], options?: { cause?: unknown; field?: string }) {
    const list = typeof reason === 'string' ? [{ reason, ...(options?.field ? { field: options.field } : {}) }] : reason;
    super(list.map((e) => (e.field ? `${e.field}: ${e.reason}` : e.reason)).join('; '), { cause: options?.cause });
    this.name = 'FulcrumError';
    this.code = code;
    this.errors = list;
  }

  static notFound(): FulcrumError {
    return new FulcrumError('not_found', 'Not found');
  }

  static validation(errors: FieldError[]): FulcrumError {
    return new FulcrumError('validation', errors);
  }

  static field(field: string, reason: string): FulcrumError {
    return new FulcrumError('validation', [{ field, reason }]);
  }

  static conflict(reason: string): FulcrumError {
    return new FulcrumError('conflict', reason);
  }
}

export function isFulcrumError(e: unknown): e is FulcrumError {
  return e instanceof FulcrumError;
}

/** Collects field errors so that several violations are reported together. */
export class ErrorCollector {
  readonly errors: FieldError[] = [];
  add(field: string | undefined, reason: string): void {
    this.errors.push(field ? { field, reason } : { reason });
  }
  get empty(): boolean {
    return this.errors.length === 0;
  }
  throwIfAny(): void {
    if (this.errors.length > 0) throw FulcrumError.validation(this.errors);
  }
}
