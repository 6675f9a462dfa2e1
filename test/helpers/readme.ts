import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { repoRoot } from './lab.js';

/** The first ```sh block after a heading of README.md, exactly as a reader copies it. */
export function readmeBlock(heading: string): string {
  const readme = readFileSync(join(repoRoot, 'README.md'), 'utf8');
  const at = readme.indexOf(`\n${heading}\n`);
  if (at < 0) throw new Error(`README.md has no heading ${heading}`);
  const m = /```sh\n([\s\S]*?)```/.exec(readme.slice(at));
  if (!m) throw new Error(`no sh block after ${heading}`);
  return m[1]!;
}
