/**
 * The answers the proxy writes itself, always with `Connection: close`, built once at load.
 * The wording follows HAProxy's own error pages (docs/dataplane.md, "Errors we generate").
 */
export interface CannedResponse {
  /** For the status-class counters. */
  readonly status: number;
  readonly bytes: Buffer;
}

function canned(status: number, reason: string, body: string): CannedResponse {
  const text = `HTTP/1.1 ${status} ${reason}\r\nContent-Type: text/html\r\nContent-Length: ${Buffer.byteLength(body)}\r\nCache-Control: no-cache\r\nConnection: close\r\n\r\n${body}`;
  return { status, bytes: Buffer.from(text, 'latin1') };
}

/** No node can serve. */
export const R503 = canned(503, 'Service Unavailable', '<html><body><h1>503 Service Unavailable</h1>\nNo server is available to handle this request.\n</body></html>\n');
/** The backend answered with something invalid, or closed before answering. */
export const R502 = canned(502, 'Bad Gateway', '<html><body><h1>502 Bad Gateway</h1>\nThe server returned an invalid or incomplete response.\n</body></html>\n');
/** The backend did not start answering in time. */
export const R504 = canned(504, 'Gateway Timeout', '<html><body><h1>504 Gateway Timeout</h1>\nThe server didn\'t respond in time.\n</body></html>\n');
/** The request could not be parsed (or would be unsafe to pass on). */
export const R400 = canned(400, 'Bad Request', '<html><body><h1>400 Bad Request</h1>\nYour browser sent an invalid request.\n</body></html>\n');
/** A request head still incomplete after the head timeout. */
export const R408 = canned(408, 'Request Timeout', '<html><body><h1>408 Request Timeout</h1>\nYour browser didn\'t send a complete request in time.\n</body></html>\n');
/** A request head over the size limit. */
export const R431 = canned(431, 'Request Header Fields Too Large', '<html><body><h1>431 Request Header Fields Too Large</h1>\n</body></html>\n');
