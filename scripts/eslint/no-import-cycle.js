// A local ESLint rule: no file in product code may sit on an import cycle.
//
// Why our own rule: the plugins that offer one resolve every import through a module resolver and
// are slow on TypeScript; our product code only uses relative `./x.js` specifiers for files inside
// the repository, so the graph is simple to build from the source itself. Static `import` and
// `export ... from` count, `import type` included: a type-only cycle still means two modules that
// cannot be understood one without the other. `await import()` does not count: it is how a module
// defers loading on purpose.
import fs from 'node:fs';
import path from 'node:path';
import ts from 'typescript';

/** file -> { mtimeMs, deps } for files read from disk; rebuilt when a file changes. */
const cache = new Map();

function resolveSpecifier(fromFile, spec) {
  if (!spec.startsWith('.')) return null;
  const base = path.resolve(path.dirname(fromFile), spec);
  const candidates = [base.replace(/\.js$/, '.ts'), base, `${base}.ts`, path.join(base, 'index.ts')];
  for (const c of candidates) {
    if (c.endsWith('.ts') && fs.existsSync(c)) return c;
  }
  return null;
}

function specifiersOf(text, fileName) {
  const sf = ts.createSourceFile(fileName, text, ts.ScriptTarget.Latest, false, ts.ScriptKind.TS);
  const out = [];
  for (const st of sf.statements) {
    if ((ts.isImportDeclaration(st) || ts.isExportDeclaration(st)) && st.moduleSpecifier && ts.isStringLiteral(st.moduleSpecifier)) {
      out.push(st.moduleSpecifier.text);
    }
  }
  return out;
}

function depsOnDisk(file) {
  let stat;
  try {
    stat = fs.statSync(file);
  } catch {
    return [];
  }
  const hit = cache.get(file);
  if (hit && hit.mtimeMs === stat.mtimeMs) return hit.deps;
  const deps = specifiersOf(fs.readFileSync(file, 'utf8'), file)
    .map((s) => resolveSpecifier(file, s))
    .filter((d) => d !== null);
  cache.set(file, { mtimeMs: stat.mtimeMs, deps });
  return deps;
}

/** Shortest path of imports from `start` back to `target`, or null. Breadth first. */
function pathBack(start, target, inScope) {
  const prev = new Map([[start, null]]);
  const queue = [start];
  while (queue.length > 0) {
    const cur = queue.shift();
    for (const next of depsOnDisk(cur)) {
      if (!inScope(next)) continue;
      if (next === target) {
        const chain = [cur];
        for (let p = prev.get(cur); p !== null; p = prev.get(p)) chain.unshift(p);
        return chain;
      }
      if (!prev.has(next)) {
        prev.set(next, cur);
        queue.push(next);
      }
    }
  }
  return null;
}

export default {
  meta: {
    type: 'problem',
    docs: { description: 'Forbid import cycles between product source files' },
    schema: [{ type: 'object', properties: { roots: { type: 'array', items: { type: 'string' } } }, additionalProperties: false }],
    messages: { cycle: 'Import cycle: {{chain}}' },
  },
  create(context) {
    const file = context.filename;
    const cwd = context.cwd;
    const roots = (context.options[0]?.roots ?? []).map((r) => path.resolve(cwd, r) + path.sep);
    const inScope = (f) => roots.length === 0 || roots.some((r) => f.startsWith(r));
    if (!inScope(file)) return {};
    const rel = (f) => path.relative(cwd, f);

    const check = (node) => {
      if (!node.source || typeof node.source.value !== 'string') return;
      const dep = resolveSpecifier(file, node.source.value);
      if (dep === null || !inScope(dep)) return;
      // The file being linted is read from the editor's text (the AST), every other file from
      // disk, so a cycle introduced by unsaved or virtual text is still caught.
      const chain = dep === file ? [] : pathBack(dep, file, inScope);
      if (chain === null) return;
      context.report({ node, messageId: 'cycle', data: { chain: [file, ...chain, file].map(rel).join(' -> ') } });
    };
    return {
      ImportDeclaration: check,
      ExportNamedDeclaration: check,
      ExportAllDeclaration: check,
    };
  },
};
