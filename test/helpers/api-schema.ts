import { readFileSync } from 'node:fs';
import { isIP } from 'node:net';
import { fileURLToPath } from 'node:url';
import { Ajv, type ValidateFunction } from 'ajv';
import { clientTypedOperations, oauthClientTypedOperations } from './api-v4-shapes.js';

/**
 * Checks response bodies against the schema of their operation, from the fixture that
 * test/fixtures/openapi/build-schemas.ts derives from the official OpenAPI subset.
 * Every status other than 200 is checked against the operation's error schema.
 */
interface Fixture {
  operations: Record<string, { operationId: string; ok: object; error: object }>;
}

const fixture: Fixture = JSON.parse(
  readFileSync(fileURLToPath(new URL('../fixtures/openapi/schemas.json', import.meta.url)), 'utf8'),
);

// The spec's label patterns are written for non-unicode regular expressions.
const ajv = new Ajv({ allErrors: true, strict: false, unicodeRegExp: false });
ajv.addFormat('ip', (s: string) => isIP(s) !== 0);

const compiled = new Map<string, { ok: ValidateFunction; error: ValidateFunction }>();
const templates = Object.keys(fixture.operations).map((key) => {
  const [method, path] = key.split(' ') as [string, string];
  // Numeric ids match digits only, so /nodebalancers/types is not taken for /nodebalancers/{nodeBalancerId}.
  const re = new RegExp(`^${path.replace(/\{(nodeBalancerId|configId|nodeId|eventId|tokenId)\}/g, '\\d+').replace(/\{[^}]+\}/g, '[^/]+')}$`);
  return { key, method, re };
});

/** Operation keys ("GET /nodebalancers/{nodeBalancerId}") validated so far, for coverage checks. */
export const validatedOperations = new Set<string>();

/** The fixture's operation for a concrete request, or undefined for a path we do not serve. */
export function operationFor(method: string, url: string): string | undefined {
  const path = new URL(url, 'http://x').pathname.replace(/^\/v4(beta)?/, '').replace(/\/+$/, '') || '/';
  return templates.find((t) => t.method === method.toUpperCase() && t.re.test(path))?.key;
}

function validators(key: string) {
  let v = compiled.get(key);
  if (!v) {
    const op = fixture.operations[key]!;
    v = { ok: ajv.compile(op.ok), error: ajv.compile(op.error) };
    compiled.set(key, v);
  }
  return v;
}

const genericError = ajv.compile({
  type: 'object',
  required: ['errors'],
  additionalProperties: false,
  properties: {
    errors: {
      type: 'array',
      minItems: 1,
      items: {
        type: 'object',
        required: ['reason'],
        additionalProperties: false,
        properties: { reason: { type: 'string', minLength: 1 }, field: { type: 'string', minLength: 1 } },
      },
    },
  },
});

/**
 * Throws when `body` does not match the schema for (method, url, status). Error bodies must
 * also have the strict `{errors:[{reason, field?}]}` shape with at least one entry.
 */
export function assertResponseSchema(method: string, url: string, status: number, body: unknown): void {
  const key = operationFor(method, url);
  const where = `${method.toUpperCase()} ${url} -> ${status}`;
  if (status !== 200) {
    if (key && !validators(key).error(body)) throw new Error(`${where}: error body does not match ${key}: ${ajv.errorsText(validators(key).error.errors)}`);
    if (!genericError(body)) throw new Error(`${where}: malformed error body ${JSON.stringify(body)}: ${ajv.errorsText(genericError.errors)}`);
    return;
  }
  if (!key) {
    // Not in the official subset: an operation typed from @linode/api-v4 (api-v4-shapes.ts), or
    // a Fulcrum-only endpoint (e.g. /v4/fulcrum/dataplanes) with no schema at all.
    const typed = clientTypedFor(method, url);
    if (typed && !typed.v(body)) throw new Error(`${where}: body does not match ${typed.key} (typed from @linode/api-v4): ${ajv.errorsText(typed.v.errors)}\n${JSON.stringify(body).slice(0, 2000)}`);
    if (typed) validatedOperations.add(typed.key);
    return;
  }
  const v = validators(key).ok;
  if (!v(body)) throw new Error(`${where}: body does not match ${key}: ${ajv.errorsText(v.errors)}\n${JSON.stringify(body).slice(0, 2000)}`);
  validatedOperations.add(key);
}

export const allOperations = Object.keys(fixture.operations);

const clientTyped = Object.entries({ ...clientTypedOperations, ...oauthClientTypedOperations }).map(([key, schema]) => {
  const [method, path] = key.split(' ') as [string, string];
  return { key, method, re: new RegExp(`^${path.replace(/\{[^}]+\}/g, '[^/]+')}$`), schema, v: undefined as ValidateFunction | undefined };
});

/** The client-typed operation for a request, with its compiled validator. */
function clientTypedFor(method: string, url: string): { key: string; v: ValidateFunction } | undefined {
  const path = new URL(url, 'http://x').pathname.replace(/^\/v4(beta)?/, '').replace(/\/+$/, '') || '/';
  const t = clientTyped.find((c) => c.method === method.toUpperCase() && c.re.test(path));
  if (!t) return undefined;
  t.v ??= ajv.compile(t.schema);
  return { key: t.key, v: t.v };
}
