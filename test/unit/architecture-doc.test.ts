import { existsSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { dirname, join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/lab.js';

/**
 * docs/architecture.md's two tables that name code, checked so they cannot drift: every file and
 * name "Who owns what" gives exists where it says, and every pair "Repetition that stays" lists
 * still repeats itself. The `duplicates` tool that finds such pairs is not in the repository (nor
 * in CI): when it shows a new pair over product code, remove the repetition or list it there.
 */

const doc = readFileSync(join(repoRoot, 'docs', 'architecture.md'), 'utf8');
const PRODUCT = ['control-plane', 'dataplane', 'agent', 'lib', 'bin'];

/** The text of `## title` up to the next `## `. */
function section(title: string): string {
  const start = doc.indexOf(`\n## ${title}\n`);
  expect(start, title).toBeGreaterThan(0);
  const end = doc.indexOf('\n## ', start + 1);
  return doc.slice(start, end < 0 ? undefined : end);
}

const ticks = (text: string) => [...text.matchAll(/`([^`]+)`/g)].map((m) => m[1]!);

/** Names a TypeScript file declares: functions, classes, methods, properties, variables, types. */
function declared(file: string): Set<string> {
  const src = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.Latest, true);
  const out = new Set<string>();
  const visit = (n: ts.Node) => {
    const name = (n as { name?: ts.Node }).name;
    const declaration = ts.isFunctionDeclaration(n) || ts.isClassDeclaration(n) || ts.isMethodDeclaration(n) || ts.isPropertyDeclaration(n)
      || ts.isVariableDeclaration(n) || ts.isInterfaceDeclaration(n) || ts.isTypeAliasDeclaration(n) || ts.isPropertyAssignment(n)
      || ts.isGetAccessorDeclaration(n) || ts.isMethodSignature(n) || ts.isPropertySignature(n) || ts.isEnumDeclaration(n);
    if (declaration && name && ts.isIdentifier(name)) out.add(name.text);
    if (ts.isShorthandPropertyAssignment(n)) out.add(n.name.text);
    ts.forEachChild(n, visit);
  };
  visit(src);
  return out;
}

/**
 * Where a file a row names is: a path from the repository's root, or a path below the folder
 * (or a parent folder, up to the process's) of a file the row named with its whole path.
 */
function resolve(token: string, bases: readonly string[]): string | undefined {
  if (existsSync(join(repoRoot, token))) return token;
  for (const base of bases) {
    for (let d = base; d !== '.' && d !== ''; d = dirname(d)) {
      if (existsSync(join(repoRoot, d, token))) return join(d, token);
    }
  }
  return undefined;
}

const IDENT = /^([A-Za-z_$][\w$]*)(?:\.([A-Za-z_$][\w$]*))?(?:\(.*\))?$/;

/** Words the table puts in backticks that are API fields, not code: checked against this list. */
const WIRE_WORDS = new Set(['algorithm', 'status', 'nodes_status', 'members', 'encrypted', 'database']);

describe('docs/architecture.md', () => {
  it('"Who owns what": every file and name it gives exists where it says', () => {
    const rows = section('Who owns what').split('\n').filter((l) => l.startsWith('| ') && !l.startsWith('| behaviour') && !l.startsWith('|---'));
    expect(rows.length).toBeGreaterThan(5);
    const problems: string[] = [];
    let names = 0;
    for (const row of rows) {
      const what = row.split('|')[1]!.trim();
      const tokens = ticks(row);
      const bases = tokens.filter((t) => PRODUCT.some((p) => t.startsWith(`${p}/`))).map((t) => (t.endsWith('/') ? t : dirname(t)));
      const files: string[] = [];
      for (const t of tokens.filter((x) => /\.(ts|js)$/.test(x) || x.endsWith('/'))) {
        const at = resolve(t, bases);
        if (at === undefined) problems.push(`${what}: no file ${t}`);
        else if (t.endsWith('/') ? !statSync(join(repoRoot, at)).isDirectory() : !statSync(join(repoRoot, at)).isFile()) problems.push(`${what}: ${t} is not a ${t.endsWith('/') ? 'folder' : 'file'}`);
        else if (at.endsWith('.ts')) files.push(at);
      }
      const decls = new Set(files.flatMap((f) => [...declared(join(repoRoot, f))]));
      for (const t of tokens.filter((x) => !/\.(ts|js)$/.test(x) && !x.endsWith('/'))) {
        if (WIRE_WORDS.has(t)) continue;
        if (t.includes('/')) {
          // A lint rule (`agent/no-state-write`): the lint configuration must use it.
          if (!readFileSync(join(repoRoot, 'eslint.config.js'), 'utf8').includes(`'${t}'`)) problems.push(`${what}: no lint rule ${t}`);
          continue;
        }
        const m = IDENT.exec(t);
        if (!m) {
          problems.push(`${what}: \`${t}\` is neither a file, a name nor an API field`);
          continue;
        }
        names++;
        for (const n of [m[1]!, m[2]].filter((x): x is string => x !== undefined)) {
          if (!decls.has(n)) problems.push(`${what}: ${n} is declared in none of ${files.join(', ')}`);
        }
      }
    }
    expect(problems).toEqual([]);
    expect(names).toBeGreaterThan(10);
  });

  it('"Repetition that stays": every pair it lists still repeats itself', () => {
    const pairs = [...section('Repetition that stays').matchAll(/^- `([^`]+)` ~ `([^`]+)`( \(shape\))?:/gm)].map((m) => ({ a: m[1]!, b: m[2]!, shape: m[3] !== undefined }));
    const bullets = section('Repetition that stays').split('\n').filter((l) => l.startsWith('- '));
    expect(pairs.length, 'every bullet is a pair: - `a` ~ `b`[ (shape)]: why').toBe(bullets.length);
    expect(pairs.length).toBeGreaterThan(5);
    const apart = pairs.filter((p) => !sharesRun(p.a, p.b, p.shape));
    expect(apart, 'pairs that no longer share six lines: remove them from the list').toEqual([]);
  });

  it('the repetition check fails on two files that do not repeat each other', () => {
    expect(sharesRun('lib/mutex.ts', 'lib/backoff.ts', true)).toBe(false);
    expect(sharesRun('lib/mutex.ts', 'lib/mutex.ts', true)).toBe(false);
  });

  it('names only product files', () => {
    const files = (dir: string): string[] => readdirSync(join(repoRoot, dir), { withFileTypes: true }).flatMap((e) => (e.isDirectory() ? files(join(dir, e.name)) : [join(dir, e.name)]));
    const product = new Set(PRODUCT.flatMap((p) => files(p)));
    const pairs = [...section('Repetition that stays').matchAll(/^- `([^`]+)` ~ `([^`]+)`/gm)].flatMap((m) => [m[1]!, m[2]!]);
    expect(pairs.filter((f) => !product.has(f))).toEqual([]);
  });
});

const KEYWORDS = new Set(('const let var function return if else for while do switch case break continue async await new class this throw try '
  + 'catch finally export type interface of in typeof instanceof true false null undefined void readonly private public static get set').split(' '));

/**
 * The lines `duplicates` compares: no blank, comment, import or lone punctuation lines, white
 * space folded; for a shape pair, names, strings and numbers made alike.
 */
function codeLines(file: string, shape: boolean): string[] {
  return readFileSync(join(repoRoot, file), 'utf8').split('\n')
    .map((l) => l.trim().replace(/\s+/g, ' '))
    .filter((l) => l !== '' && !/^(\/\/|\/\*|\*)/.test(l) && !l.startsWith('import ') && !/^[{}()[\];,.]*$/.test(l))
    .map((l) => (shape ? l.replace(/'(?:[^'\\]|\\.)*'|"(?:[^"\\]|\\.)*"|`(?:[^`\\]|\\.)*`/g, 'S').replace(/\b\d[\d_.]*\b/g, 'N').replace(/[A-Za-z_$][\w$]*/g, (w) => (KEYWORDS.has(w) ? w : 'I')) : l));
}

/** Whether `a` and `b` share a run of six such lines (two runs apart from each other in one file). */
function sharesRun(a: string, b: string, shape: boolean, min = 6): boolean {
  const la = codeLines(a, shape);
  const lb = a === b ? la : codeLines(b, shape);
  const runs = new Map<string, number[]>();
  for (let i = 0; i + min <= la.length; i++) {
    const key = la.slice(i, i + min).join('\n');
    runs.set(key, [...(runs.get(key) ?? []), i]);
  }
  for (let j = 0; j + min <= lb.length; j++) {
    const at = runs.get(lb.slice(j, j + min).join('\n'));
    if (at && (a !== b || at.some((i) => Math.abs(i - j) >= min))) return true;
  }
  return false;
}
