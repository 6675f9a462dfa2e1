import { describe, expect, it } from 'vitest';
import { applyFilter, parseFilter } from '../../../control-plane/api/filter.js';
import { paginate, parsePage } from '../../../control-plane/api/pagination.js';
import { isFulcrumError } from '../../../lib/errors.js';

const items = [
  { id: 1, label: 'web', created: '2024-07-03T13:05:41', tags: ['a', 'prod'], entity: { id: 7, type: 'nodebalancer' } },
  { id: 2, label: 'db', created: '2024-07-03T13:05:42', tags: [], entity: { id: 8, type: 'database' } },
  { id: 3, label: 'cache', created: '2024-07-04T00:00:00', tags: ['prod'], entity: { id: 7, type: 'nodebalancer' } },
];
const fields = ['id', 'label', 'created', 'tags', 'entity.id', 'entity.type'];
const run = (f: unknown) => applyFilter(items, parseFilter(JSON.stringify(f), fields)).map((i) => i.id);
const fails = (header: string, allowed = fields): { field?: string; reason: string } => {
  try {
    parseFilter(header, allowed);
  } catch (e) {
    if (isFulcrumError(e) && e.code === 'validation') return e.errors[0]!;
    throw e;
  }
  throw new Error(`filter ${header} was accepted`);
};

describe('X-Filter', () => {
  it('evaluates equality, operators, dotted keys and nesting', () => {
    expect(run({ label: 'db' })).toEqual([2]);
    expect(run({ 'entity.id': 7, 'entity.type': 'nodebalancer' })).toEqual([1, 3]);
    expect(run({ id: { '+gte': 2 } })).toEqual([2, 3]);
    expect(run({ id: { '+gt': '1' } })).toEqual([2, 3]);
    expect(run({ created: { '+gte': '2024-07-03T13:05:42' } })).toEqual([2, 3]);
    expect(run({ created: { '+lt': '2024-07-04T00:00:00' }, label: { '+neq': 'web' } })).toEqual([2]);
    expect(run({ tags: 'prod' })).toEqual([1, 3]);
    expect(run({ label: { '+contains': 'ca' } })).toEqual([3]);
    expect(run({ '+or': [{ label: 'web' }, { '+and': [{ id: { '+gt': 1 } }, { tags: 'prod' }] }] })).toEqual([1, 3]);
    expect(run({ label: { '+or': ['db', 'web'] } })).toEqual([1, 2]);
    expect(run({ label: { '+eq': 'web' } })).toEqual([1]);
  });

  it('orders by a filterable field, ascending by default', () => {
    expect(run({ '+order_by': 'label' })).toEqual([3, 2, 1]);
    expect(run({ '+order_by': 'created', '+order': 'desc' })).toEqual([3, 2, 1]);
    expect(run({ '+order_by': 'id', '+order': 'desc', tags: 'prod' })).toEqual([3, 1]);
    expect(parseFilter('', fields)).toBeUndefined();
    expect(parseFilter(undefined, fields)).toBeUndefined();
  });

  it('refuses bad filters with field X-Filter', () => {
    expect(fails('{"hostname":"x"}')).toEqual({ field: 'X-Filter', reason: 'Cannot filter on hostname' });
    expect(fails('{"+order_by":"hostname"}')).toEqual({ field: 'X-Filter', reason: 'Cannot filter on hostname' });
    expect(fails('{"port":80}', [])).toEqual({ field: 'X-Filter', reason: 'Cannot filter on port' });
    for (const h of ['{', '[]', 'null', '1', '{"+nand":[]}', '{"label":{"+like":"x"}}', '{"+or":[]}', '{"label":{}}x', '{"label":{"+gt":[]}}',
      '{"+order":"up"}', '{"+order_by":1}', `{"label":"${'x'.repeat(9000)}"}`, `${'{"+and":['.repeat(12)}{}${']}'.repeat(12)}`]) {
      expect(fails(h).field, h).toBe('X-Filter');
    }
  });
});

describe('pagination', () => {
  it('parses page and page_size with the real bounds', () => {
    expect(parsePage({})).toEqual({ page: 1, pageSize: 100 });
    expect(parsePage({ page: '3', page_size: '25' })).toEqual({ page: 3, pageSize: 25 });
    for (const q of [{ page_size: '10' }, { page_size: '600' }, { page_size: 'x' }, { page_size: ['25', '50'] }]) {
      expect(() => parsePage(q)).toThrow(/page_size/);
    }
    for (const q of [{ page: '0' }, { page: '-1' }, { page: '1.5' }]) expect(() => parsePage(q)).toThrow(/page/);
  });

  it('builds the envelope: empty is page 1 of 1, past the end is empty', () => {
    expect(paginate([], { page: 1, pageSize: 25 })).toEqual({ data: [], page: 1, pages: 1, results: 0 });
    const xs = Array.from({ length: 60 }, (_, i) => i);
    expect(paginate(xs, { page: 3, pageSize: 25 })).toEqual({ data: xs.slice(50), page: 3, pages: 3, results: 60 });
    expect(paginate(xs, { page: 4, pageSize: 25 })).toEqual({ data: [], page: 4, pages: 3, results: 60 });
  });
});
