import { readdirSync, readFileSync } from 'node:fs';
import path from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/lab.js';

// Rules about the shape of the product code that no compiler checks: files small enough to read
// in one sitting, and comments that point at documents a clone of this repository contains.
const productRoots = ['control-plane', 'dataplane', 'agent', 'lib', 'bin'];
const maxLines = 400;

function sourceFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = path.join(dir, e.name);
    if (e.isDirectory()) return sourceFiles(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

const files = productRoots.flatMap((r) => sourceFiles(path.join(repoRoot, r)));
const rel = (f: string) => path.relative(repoRoot, f);

describe('repository shape', () => {
  it('reads the product tree', () => {
    // Guards the two checks below against passing on an empty list.
    expect(files.length).toBeGreaterThan(100);
  });

  it(`keeps every product source file at or under ${maxLines} lines`, () => {
    const long = files
      .map((f) => ({ f: rel(f), lines: readFileSync(f, 'utf8').split('\n').length }))
      .filter((x) => x.lines > maxLines);
    expect(long).toEqual([]);
  });

  it('cites only documents inside the repository, and no issue numbers', () => {
    const outside = /DESIGN(\.md| §)|\.\.\/shared\/|\breference [\w-]+ §|\bissue #?\d+/i;
    const hits = files.flatMap((f) =>
      readFileSync(f, 'utf8')
        .split('\n')
        .map((line, i) => ({ at: `${rel(f)}:${i + 1}`, line }))
        .filter((x) => outside.test(x.line))
        .map((x) => `${x.at}: ${x.line.trim()}`),
    );
    expect(hits).toEqual([]);
  });
});
