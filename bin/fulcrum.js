#!/usr/bin/env node
// Runs the compiled CLI when built (npm run build), else the TypeScript sources through tsx.
import { existsSync } from 'node:fs';
import { fileURLToPath, pathToFileURL } from 'node:url';
import { dirname, join } from 'node:path';

const root = join(dirname(fileURLToPath(import.meta.url)), '..');

// Fulcrum needs Node.js 24 (package.json engines). An older node stops here, saying which node
// ran and where the project's own Node 24 is, instead of failing later in a native module.
if (Number(process.versions.node.split('.')[0]) < 24) {
  const own = join(root, 'node_modules', '.bin', 'node');
  process.stderr.write(`fulcrum: needs Node.js 24 or later, and this is ${process.version} (${process.execPath}).\n` + (existsSync(own)
    ? `npm ci installed Node 24 as ${own}: run bin/fulcrum.js with it, or through npm (npm run lab), whose scripts put it first on PATH.\n`
    : 'Install Node.js 24 (docs/install.md).\n'));
  process.exit(1);
}
const built = join(root, 'dist', 'bin', 'fulcrum.js');
if (existsSync(built) && !process.env.FULCRUM_FROM_SOURCE) {
  await import(pathToFileURL(built).href);
} else {
  const { register } = await import('tsx/esm/api');
  register();
  await import(pathToFileURL(join(root, 'bin', 'fulcrum.ts')).href);
}
