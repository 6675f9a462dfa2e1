/**
 * Which check_body patterns the API refuses because a backtracking engine can take exponential
 * time on them (docs/security/traffic.md): a repeated group that itself holds a repetition
 * (`(a+)+`, `(a*b?)*`, `(\w+\s?){2,}`), a repeated alternation (`(a|ab)*`), and backreferences
 * (`(a+)\1`). Polynomial cases (`.*a.*b` on a long body) are not refused here; the data plane's
 * matcher stops any match after its time limit (dataplane/health/body-match.ts).
 */
export type RegexHazard = 'nested_repeat' | 'repeated_alternation' | 'backreference';

interface Frame {
  repeats: boolean;
  alternates: boolean;
}

/** The quantifier starting at `i`, if any: its length and whether it repeats (max > 1). */
function quantifierAt(p: string, i: number): { len: number; repeats: boolean } | null {
  const c = p[i];
  if (c === '*' || c === '+') return { len: 1, repeats: true };
  if (c === '?') return { len: 1, repeats: false };
  if (c !== '{') return null;
  const m = /^\{(\d+)(,(\d*))?\}/.exec(p.slice(i));
  if (!m) return null; // a literal brace (Annex B)
  const max = m[2] === undefined ? Number(m[1]) : m[3] === '' ? Infinity : Number(m[3]);
  return { len: m[0].length, repeats: max > 1 };
}

export function regexHazard(pattern: string): RegexHazard | null {
  const stack: Frame[] = [{ repeats: false, alternates: false }];
  // What the next quantifier applies to: a closed group (its frame) or a single atom.
  let last: Frame | 'atom' | null = null;
  let i = 0;
  while (i < pattern.length) {
    const c = pattern[i];
    const q = quantifierAt(pattern, i);
    if (q !== null && last !== null) {
      if (q.repeats && last !== 'atom' && last.repeats) return 'nested_repeat';
      if (q.repeats && last !== 'atom' && last.alternates) return 'repeated_alternation';
      if (q.repeats) stack[stack.length - 1].repeats = true;
      i += q.len;
      if (pattern[i] === '?') i++; // lazy: same hazard
      last = null;
      continue;
    }
    if (c === '\\') {
      const n = pattern[i + 1] ?? '';
      if (/[1-9]/.test(n) || (n === 'k' && pattern[i + 2] === '<')) return 'backreference';
      i += 2;
      last = 'atom';
      continue;
    }
    if (c === '[') {
      i++;
      while (i < pattern.length && pattern[i] !== ']') i += pattern[i] === '\\' ? 2 : 1;
      i++;
      last = 'atom';
      continue;
    }
    if (c === '(') {
      stack.push({ repeats: false, alternates: false });
      i++;
      if (pattern[i] === '?') {
        // (?: (?= (?! (?<= (?<! (?<name>
        const m = /^\?(:|=|!|<=|<!|<[A-Za-z_$][\w$]*>)/.exec(pattern.slice(i));
        i += m ? m[0].length : 1;
      }
      last = null;
      continue;
    }
    if (c === ')') {
      const f = stack.length > 1 ? stack.pop()! : { repeats: false, alternates: false };
      // A group that repeats inside makes its parent repeat too.
      if (f.repeats) stack[stack.length - 1].repeats = true;
      last = f;
      i++;
      continue;
    }
    if (c === '|') {
      stack[stack.length - 1].alternates = true;
      last = null;
      i++;
      continue;
    }
    last = 'atom';
    i++;
  }
  return null;
}
