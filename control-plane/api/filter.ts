import { FulcrumError } from '../../lib/errors.js';
import { apiReasons } from './errors.js';

/**
 * The `X-Filter` header: a JSON object whose plain keys mean equality (ANDed), with the operators
 * +and +or +gt +gte +lt +lte +contains +neq (and +eq, which linodego may send), plus top-level
 * +order_by / +order. Keys may be dotted (`entity.id`). Filtering is applied to the objects in their
 * wire shape, so a key means exactly what the client sees in the response.
 */
export interface ParsedFilter {
  predicate: (obj: unknown) => boolean;
  orderBy?: string;
  order: 'asc' | 'desc';
}

const MAX_HEADER = 8 * 1024;
const MAX_DEPTH = 8;

function bad(reason: string): FulcrumError {
  return FulcrumError.field('X-Filter', reason);
}

function getPath(obj: unknown, path: string): unknown {
  let cur: any = obj;
  for (const part of path.split('.')) {
    if (cur === null || typeof cur !== 'object') return undefined;
    cur = cur[part];
  }
  return cur;
}

type Scalar = string | number | boolean | null;
const isScalar = (v: unknown): v is Scalar => v === null || ['string', 'number', 'boolean'].includes(typeof v);

function compare(a: unknown, b: Scalar): number | undefined {
  if (typeof a === 'number' && typeof b === 'number') return a - b;
  if (typeof a === 'string' && typeof b === 'string') return a < b ? -1 : a > b ? 1 : 0;
  if (typeof a === 'string' && typeof b === 'number' && a !== '' && !Number.isNaN(Number(a))) return Number(a) - b;
  if (typeof a === 'number' && typeof b === 'string' && b !== '' && !Number.isNaN(Number(b))) return a - Number(b);
  return undefined;
}

function equals(actual: unknown, expected: Scalar): boolean {
  // Arrays (tags) match when any element matches, as the real API does for tag filters.
  if (Array.isArray(actual)) return actual.some((a) => equals(a, expected));
  if (actual === expected) return true;
  if (typeof actual === 'number' && typeof expected === 'string') return String(actual) === expected;
  if (typeof actual === 'string' && typeof expected === 'number') return actual === String(expected);
  return false;
}

function fieldCondition(field: string, cond: unknown, filterable: Set<string>, depth: number): (o: unknown) => boolean {
  if (!filterable.has(field)) throw bad(apiReasons.filterField(field));
  if (isScalar(cond)) return (o) => equals(getPath(o, field), cond);
  if (Array.isArray(cond) || typeof cond !== 'object') throw bad(apiReasons.filterValue(field));
  if (depth > MAX_DEPTH) throw bad(apiReasons.filterTooDeep);
  const tests: ((o: unknown) => boolean)[] = [];
  for (const [op, v] of Object.entries(cond as Record<string, unknown>)) {
    switch (op) {
      case '+eq':
        if (!isScalar(v)) throw bad(apiReasons.filterScalar(op));
        tests.push((o) => equals(getPath(o, field), v));
        break;
      case '+neq':
        if (!isScalar(v)) throw bad(apiReasons.filterScalar(op));
        tests.push((o) => !equals(getPath(o, field), v));
        break;
      case '+gt': case '+gte': case '+lt': case '+lte': {
        if (typeof v !== 'number' && typeof v !== 'string') throw bad(apiReasons.filterComparable(op));
        tests.push((o) => {
          const c = compare(getPath(o, field), v);
          if (c === undefined) return false;
          return op === '+gt' ? c > 0 : op === '+gte' ? c >= 0 : op === '+lt' ? c < 0 : c <= 0;
        });
        break;
      }
      case '+contains': {
        if (typeof v !== 'string') throw bad(apiReasons.filterContains);
        tests.push((o) => {
          const a = getPath(o, field);
          if (Array.isArray(a)) return a.some((x) => typeof x === 'string' && x.includes(v));
          return typeof a === 'string' && a.includes(v);
        });
        break;
      }
      case '+or': {
        if (!Array.isArray(v) || v.some((x) => !isScalar(x))) throw bad(apiReasons.filterFieldOr);
        tests.push((o) => (v as Scalar[]).some((x) => equals(getPath(o, field), x)));
        break;
      }
      default:
        throw bad(apiReasons.filterOperator(op));
    }
  }
  return (o) => tests.every((t) => t(o));
}

function clause(obj: unknown, filterable: Set<string>, depth: number): (o: unknown) => boolean {
  if (depth > MAX_DEPTH) throw bad(apiReasons.filterTooDeep);
  if (obj === null || typeof obj !== 'object' || Array.isArray(obj)) throw bad(apiReasons.filterNotObject);
  const tests: ((o: unknown) => boolean)[] = [];
  for (const [k, v] of Object.entries(obj as Record<string, unknown>)) {
    if (k === '+order_by' || k === '+order') continue;
    if (k === '+and' || k === '+or') {
      // An empty `+and` is every object (no condition to fail): the Terraform provider's list
      // data sources send `{"+and": [], "+order": "desc"}` when they have no filter block, as
      // the README's `data "linode_database_engines"` does. An empty `+or` stays an error.
      if (!Array.isArray(v) || (v.length === 0 && k === '+or')) throw bad(apiReasons.filterList(k));
      const subs = v.map((x) => clause(x, filterable, depth + 1));
      tests.push(k === '+and' ? (o) => subs.every((s) => s(o)) : (o) => subs.some((s) => s(o)));
      continue;
    }
    if (k.startsWith('+')) throw bad(apiReasons.filterOperator(k));
    tests.push(fieldCondition(k, v, filterable, depth + 1));
  }
  return (o) => tests.every((t) => t(o));
}

/** Parses the header value; throws a 400 naming `X-Filter` when it is malformed or unfilterable. */
export function parseFilter(header: string | undefined, filterable: readonly string[]): ParsedFilter | undefined {
  if (header === undefined || header.trim() === '') return undefined;
  if (header.length > MAX_HEADER) throw bad(apiReasons.filterTooLong);
  let json: unknown;
  try {
    json = JSON.parse(header);
  } catch {
    throw bad(apiReasons.filterNotJson);
  }
  const allowed = new Set(filterable);
  const predicate = clause(json, allowed, 0);
  const top = json as Record<string, unknown>;
  let orderBy: string | undefined;
  let order: 'asc' | 'desc' = 'asc';
  if (top['+order_by'] !== undefined) {
    if (typeof top['+order_by'] !== 'string') throw bad(apiReasons.filterOrderBy);
    if (!allowed.has(top['+order_by'])) throw bad(apiReasons.filterField(top['+order_by']));
    orderBy = top['+order_by'];
  }
  if (top['+order'] !== undefined) {
    if (top['+order'] !== 'asc' && top['+order'] !== 'desc') throw bad(apiReasons.filterOrder);
    order = top['+order'];
  }
  return { predicate, orderBy, order };
}

/** Applies a parsed filter (and its ordering) to wire-shaped objects. */
export function applyFilter<T>(items: T[], f: ParsedFilter | undefined): T[] {
  if (!f) return items;
  const out = items.filter((i) => f.predicate(i));
  if (f.orderBy) {
    const key = f.orderBy;
    const dir = f.order === 'desc' ? -1 : 1;
    out.sort((a, b) => {
      const x = getPath(a, key) as any;
      const y = getPath(b, key) as any;
      if (x === y) return 0;
      if (x === null || x === undefined) return -dir;
      if (y === null || y === undefined) return dir;
      return (x < y ? -1 : 1) * dir;
    });
  }
  return out;
}
