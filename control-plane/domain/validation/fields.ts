import type { ErrorCollector } from '../../../lib/errors.js';

/**
 * Declarative request-field rules, shared by the product areas. Each field has one spec; its rules
 * run in a fixed order (presence, type, range, allowed values, pattern, custom check) and the
 * first one the value breaks is reported with the field's path and the spec's reason. Checking
 * then goes on with the next field, so a client sees every violation in one 400 (the convention
 * in docs/architecture.md). The texts themselves live in each area's validation file.
 */

export type Body = Record<string, unknown>;

/** A reason is a fixed text or is built from the value that broke the rule. */
export type Reason = string | ((value: any) => string);

export interface FieldSpec {
  /** Reported when the field is absent; without it an absent field is skipped. */
  required?: string;
  /**
   * What `null` means. By default it is an ordinary value (and fails a type rule); `absent`
   * treats it like a missing field; `value` accepts it as is, without the other rules.
   */
  null?: 'absent' | 'value';
  type?: { is: 'integer' | 'string' | 'boolean' | 'array' | 'object'; reason: Reason };
  /** Inclusive bounds: of the value for integers, of the length for strings and arrays. */
  range?: { min?: number; max?: number; reason: Reason };
  oneOf?: { values: readonly unknown[]; reason: Reason };
  pattern?: { re: RegExp; reason: Reason };
  /** Any other rule: returns the reason when the value breaks it. */
  check?: (value: any) => string | undefined;
}

/** `configs[0]` + `port` gives `configs[0].port`; no prefix gives the bare field. */
export function fieldPath(prefix: string, field: string): string {
  return prefix ? `${prefix}.${field}` : field;
}

function isType(v: unknown, is: NonNullable<FieldSpec['type']>['is']): boolean {
  switch (is) {
    case 'integer': return typeof v === 'number' && Number.isInteger(v);
    case 'string': return typeof v === 'string';
    case 'boolean': return typeof v === 'boolean';
    case 'array': return Array.isArray(v);
    case 'object': return v !== null && typeof v === 'object' && !Array.isArray(v);
  }
}

/** The reason `value` breaks `spec` with, or undefined when it meets every rule. */
function violation(value: unknown, spec: FieldSpec): string | undefined {
  const text = (r: Reason) => (typeof r === 'string' ? r : r(value));
  if (spec.type && !isType(value, spec.type.is)) return text(spec.type.reason);
  if (spec.range) {
    const n = typeof value === 'number' ? value : (value as { length: number }).length;
    if ((spec.range.min !== undefined && n < spec.range.min) || (spec.range.max !== undefined && n > spec.range.max)) return text(spec.range.reason);
  }
  if (spec.oneOf && !spec.oneOf.values.includes(value)) return text(spec.oneOf.reason);
  if (spec.pattern && !spec.pattern.re.test(value as string)) return text(spec.pattern.reason);
  return spec.check?.(value);
}

/**
 * Checks one value found at `path`. Returns it when it meets the spec, undefined when it is absent
 * or breaks a rule (the violation is then in `errs`), and null when the spec accepts null.
 */
export function checkValue<T = unknown>(errs: ErrorCollector, path: string, value: unknown, spec: FieldSpec): T | undefined {
  if (value === null && spec.null === 'value') return null as T;
  if (value === undefined || (value === null && spec.null === 'absent')) {
    if (spec.required) errs.add(path, spec.required);
    return undefined;
  }
  const reason = violation(value, spec);
  if (reason !== undefined) {
    errs.add(path, reason);
    return undefined;
  }
  return value as T;
}

/** Checks `body[field]`; see checkValue. */
export function checkField<T = unknown>(errs: ErrorCollector, body: Body, field: string, spec: FieldSpec, prefix = ''): T | undefined {
  return checkValue<T>(errs, fieldPath(prefix, field), body[field], spec);
}

/**
 * Checks every field of `specs`, in their order, and returns the values that are present and
 * valid (a field absent from the result was absent or is reported in `errs`).
 */
export function checkFields<K extends string>(errs: ErrorCollector, body: Body, specs: Record<K, FieldSpec>, prefix = ''): Partial<Record<K, unknown>> {
  const out: Partial<Record<K, unknown>> = {};
  for (const field of Object.keys(specs) as K[]) {
    const v = checkField(errs, body, field, specs[field], prefix);
    if (v !== undefined) out[field] = v;
  }
  return out;
}
