import { STATUS_CODES } from 'node:http';
import { FulcrumError, isFulcrumError, type ErrorCode } from '../../lib/errors.js';

/**
 * The one place where errors become HTTP: code to status, the `{"errors":[{reason, field?}]}`
 * body, and the texts of the errors the HTTP layer raises itself. The product areas keep their
 * validation texts in their own validation files (docs/api.md lists where).
 *
 * State conflicts and unavailable dependencies are 400, never 409 or 503: linodego retries 503
 * for ever and no client expects 409.
 */
export const statusByCode: Readonly<Record<ErrorCode, number>> = {
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

/**
 * Texts of the errors raised by the HTTP layer: parsing, routing, scopes, X-Filter and paging.
 * Clients and tests match on these byte for byte; the inventory in
 * test/unit/api/error-inventory.test.ts lists them.
 */
export const apiReasons = {
  headersTooLarge: 'The request headers are too large',
  requestMalformed: 'The request is malformed',
  requestTimeout: 'The request took too long to arrive',
  urlMalformed: 'The request URL is malformed',
  badRequest: 'Bad request',
  bodyNotJson: 'The request body is not valid JSON',
  bodyNotObject: 'The request body must be a JSON object',
  bodyTooLarge: 'The request body is too large',
  scopeMissing: 'Your OAuth token is not authorized to use this endpoint.',
  rateLimited: 'Too many requests',
  internal: 'Internal server error',
  positiveInteger: (param: string) => `${param} must be a positive integer`,
  pageMin: 'page must be 1 or greater',
  pageSize: 'page_size must be between 25 and 500',
  filterTooLong: 'Filter is too long',
  filterNotJson: 'Filter is not valid JSON',
  filterNotObject: 'Filter must be a JSON object',
  filterTooDeep: 'Filter is nested too deeply',
  filterField: (field: string) => `Cannot filter on ${field}`,
  filterValue: (field: string) => `Invalid value for ${field}`,
  filterOperator: (op: string) => `Unknown operator ${op}`,
  filterScalar: (op: string) => `${op} needs a scalar value`,
  filterComparable: (op: string) => `${op} needs a number or a string`,
  filterContains: '+contains needs a string',
  filterFieldOr: '+or on a field needs an array of values',
  filterList: (op: string) => `${op} needs a non-empty array`,
  filterOrderBy: '+order_by must be a string',
  filterOrder: '+order must be asc or desc',
} as const;

export function httpStatus(e: FulcrumError): number {
  return statusByCode[e.code] ?? 500;
}

function errorBody(e: FulcrumError): { errors: { reason: string; field?: string }[] } {
  return { errors: e.errors.map((x) => (x.field ? { reason: x.reason, field: x.field } : { reason: x.reason })) };
}

/** The body as sent: the server writes JSON text itself so the content type stays exact. */
export function errorJson(e: FulcrumError): string {
  return JSON.stringify(errorBody(e));
}

/** A 400 without a field, for requests refused before any route saw them. */
export function badRequest(reason: string): FulcrumError {
  return FulcrumError.validation([{ reason }]);
}

/**
 * Any thrown value as the error the client sees: a FulcrumError as is; fastify's own client
 * errors (body too large, bad encoding, ...) as a 400 in the API's shape; anything else as a
 * 500 whose text tells nothing of the cause (which goes to the log).
 */
export function toApiError(err: unknown): FulcrumError {
  if (isFulcrumError(err)) return err;
  const statusCode = (err as { statusCode?: number }).statusCode;
  if (statusCode && statusCode >= 400 && statusCode < 500) {
    return badRequest(statusCode === 413 ? apiReasons.bodyTooLarge : (err as Error).message || apiReasons.badRequest);
  }
  return new FulcrumError('internal', apiReasons.internal, { cause: err });
}

/** Errors of Node's HTTP parser (headers over 16 KiB, broken request lines), before fastify. */
export function parserError(code: string | undefined): FulcrumError {
  return badRequest(code === 'HPE_HEADER_OVERFLOW' ? apiReasons.headersTooLarge : apiReasons.requestMalformed);
}

/** Errors fastify raises before routing (malformed URLs and the like). */
export function frameworkError(code: string | undefined): FulcrumError {
  return badRequest(code === 'FST_ERR_BAD_URL' ? apiReasons.urlMalformed : apiReasons.badRequest);
}

/** A whole HTTP/1.1 response closing the connection, for a socket no reply object exists for. */
export function rawErrorResponse(e: FulcrumError): string {
  return rawResponse(httpStatus(e), errorJson(e));
}

/**
 * The answer to a request whose headers and body did not arrive within the request timeout
 * (lib/listener-limits.ts). 408 is not one of the codes' statuses: only the listener sends it.
 */
export function requestTimeoutResponse(): string {
  return rawResponse(408, JSON.stringify({ errors: [{ reason: apiReasons.requestTimeout }] }));
}

function rawResponse(status: number, body: string): string {
  return `HTTP/1.1 ${status} ${STATUS_CODES[status]}\r\nContent-Type: application/json\r\nContent-Length: ${Buffer.byteLength(body)}\r\nConnection: close\r\n\r\n${body}`;
}
