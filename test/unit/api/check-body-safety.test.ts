import { describe, expect, it } from 'vitest';
import { regexHazard } from '../../../control-plane/domain/nodebalancers/regex-safety.js';
import { ConcurrencyCap } from '../../../lib/conn-cap.js';

describe('check_body regex hazards', () => {
  it('refuses nested repetition, repeated alternation and backreferences', () => {
    for (const p of ['^(a+)+$', '(a*)*', '(?:a+b?)+', '((a)+)+', '(\\w+\\s?){2,}', '(a+){3}', '(x+x+)+y', '([a-z]+)*$', '(a+)+?']) expect(regexHazard(p), p).toBe('nested_repeat');
    for (const p of ['(a|ab)*', '(?:a|b)+c', '(x|y){2,5}']) expect(regexHazard(p), p).toBe('repeated_alternation');
    for (const p of ['(a+)\\1', '(?<x>a)\\k<x>']) expect(regexHazard(p), p).toBe('backreference');
  });

  it('accepts the patterns health checks use', () => {
    for (const p of ['OK', 'status.*ok', '^healthy$', '"status":\\s*"up"', 'a|b', '(ok)?done', '[(+)]+', 'x{2}', '\\(a+\\)+', '(a+)?', 'v\\d+\\.\\d+', '(ab){2}c*']) expect(regexHazard(p), p).toBeNull();
  });
});

describe('ConcurrencyCap', () => {
  it('counts per key and in total, and releases', () => {
    const cap = new ConcurrencyCap(2, 3);
    expect(cap.admit('a')).toBeNull();
    expect(cap.admit('a')).toBeNull();
    expect(cap.admit('a')).toBe('per_key');
    expect(cap.admit('b')).toBeNull();
    expect(cap.admit('c')).toBe('total');
    cap.release('a');
    expect(cap.admit('c')).toBeNull();
    expect(cap.size).toBe(3);
    expect(cap.of('a')).toBe(1);
    cap.release('zzz');
    expect(cap.size).toBe(3);
  });
});
