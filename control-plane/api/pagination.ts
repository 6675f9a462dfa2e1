import { FulcrumError } from '../../lib/errors.js';
import { apiReasons } from './errors.js';

export interface Page {
  page: number;
  pageSize: number;
}

export interface Envelope<T> {
  data: T[];
  page: number;
  pages: number;
  results: number;
}

function intParam(raw: unknown, field: string): number | undefined {
  if (raw === undefined || raw === '') return undefined;
  if (typeof raw !== 'string' || !/^\d{1,18}$/.test(raw)) throw FulcrumError.field(field, apiReasons.positiveInteger(field));
  return Number(raw);
}

/**
 * `page` starts at 1; `page_size` is 25..500 with 100 by default. Out-of-range values are refused
 * with a 400 naming the parameter rather than clamped, so a client bug shows up at once.
 */
export function parsePage(query: Record<string, unknown>): Page {
  const page = intParam(query.page, 'page') ?? 1;
  const pageSize = intParam(query.page_size, 'page_size') ?? 100;
  if (page < 1) throw FulcrumError.field('page', apiReasons.pageMin);
  if (pageSize < 25 || pageSize > 500) throw FulcrumError.field('page_size', apiReasons.pageSize);
  return { page, pageSize };
}

/** Builds the envelope. An empty collection is page 1 of 1; a page past the end has no data. */
export function paginate<T>(items: T[], p: Page): Envelope<T> {
  const pages = Math.max(1, Math.ceil(items.length / p.pageSize));
  const start = (p.page - 1) * p.pageSize;
  return { data: items.slice(start, start + p.pageSize), page: p.page, pages, results: items.length };
}
