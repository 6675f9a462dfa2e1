import type { FulcrumError, ErrorCode } from '../../lib/errors.js';

/**
 * The one place where error codes become HTTP statuses. State conflicts and unavailable
 * dependencies are 400, never 409 or 503: linodego retries 503 for ever and no client expects 409.
 */
const statusByCode: Record<ErrorCode, number> = {
  invalid_token: 401,
  scope_missing: 401,
  forbidden: 403,
  not_found: 404,
  validation: 400,
  conflict: 400,
  rate_limited: 429,
  unavailable: 400,
  invalid_config: 400,
  internal: 500,
};

export function httpStatus(e: FulcrumError): number {
  return statusByCode[e.code] ?? 500;
}

export function errorBody(e: FulcrumError): { errors: { reason: string; field?: string }[] } {
  return { errors: e.errors.map((x) => (x.field ? { reason: x.reason, field: x.field } : { reason: x.reason })) };
}
