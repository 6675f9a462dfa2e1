import { describe, expect, it } from 'vitest';
import { ESLint } from 'eslint';
import { repoRoot } from '../helpers/lab.js';

// The three processes talk only over gRPC; the lint rule is what keeps them honest.
// ESLint's first run loads every plugin and the TypeScript parser: slow on a busy 2-core machine.
describe('lint: process boundaries', { timeout: 60_000 }, () => {
  // The boundary and cycle rules need no types: the type-aware promise rules eslint.config.js adds
  // for control-plane/ (a TypeScript program over the whole project) are left to `npx eslint .`,
  // so that this test does not build that program on a busy machine.
  const eslint = new ESLint({
    cwd: repoRoot,
    overrideConfig: {
      files: ['control-plane/**/*.ts'],
      languageOptions: { parserOptions: { projectService: false } },
      rules: { '@typescript-eslint/no-floating-promises': 'off', '@typescript-eslint/no-misused-promises': 'off' },
    },
  });
  const lint = async (file: string, code: string, rule = 'no-restricted-imports') => {
    const [r] = await eslint.lintText(code, { filePath: `${repoRoot}/${file}` });
    return r!.messages.filter((m) => m.ruleId === rule).map((m) => m.message);
  };

  it.each([
    ['dataplane/x.ts', "import { startControlPlane } from '../control-plane/main.js';\nexport const x = startControlPlane;\n"],
    ['dataplane/x.ts', "import { startAgent } from '../agent/main.js';\nexport const x = startAgent;\n"],
    ['agent/x.ts', "import { startDataplane } from '../dataplane/main.js';\nexport const x = startDataplane;\n"],
    ['control-plane/api/x.ts', "import { createProxyEngine } from '../../dataplane/engine.js';\nexport const x = createProxyEngine;\n"],
    ['lib/x.ts', "import { startAgent } from '../agent/main.js';\nexport const x = startAgent;\n"],
  ])('%s may not import another process', async (file, code) => {
    expect((await lint(file, code)).length).toBe(1);
  });

  it('allows lib/ and proto/ imports', async () => {
    expect(await lint('dataplane/x.ts', "import { FulcrumError } from '../lib/errors.js';\nexport const x = FulcrumError;\n")).toEqual([]);
  });

  it('keeps the control-plane domain free of the API layer', async () => {
    const msgs = await lint('control-plane/domain/x.ts', "import { httpStatus } from '../api/errors.js';\nexport const x = httpStatus;\n");
    expect(msgs).toHaveLength(1);
    expect(msgs[0]).toMatch(/domain must not import control-plane\/api/);
    // The API importing the domain is the intended direction.
    expect(await lint('control-plane/api/x.ts', "import { FulcrumError } from '../../lib/errors.js';\nexport const x = FulcrumError;\n")).toEqual([]);
  });

  it('keeps the push servers to translating: no store import, no transaction', async () => {
    const imported = await lint('control-plane/push/agent-server.ts', "import { openStore } from '../store/open.js';\nexport const x = openStore;\n");
    expect(imported).toHaveLength(1);
    expect(imported[0]).toMatch(/push server only translates: it must not import control-plane\/store/);
    expect(await lint('control-plane/push/config-server.ts', "import type { Db } from '../store/sqlite/database.js';\nexport type X = Db;\n")).toHaveLength(1);
    const tx = await lint('control-plane/push/agent-server.ts', 'export const place = (repo: { transaction(fn: () => Promise<number>): Promise<number> }) => repo.transaction(async () => 1);\n', 'no-restricted-syntax');
    expect(tx).toHaveLength(1);
    expect(tx[0]).toMatch(/must not run a transaction/);
    // The process boundary still holds there, and a domain service may use the store.
    expect(await lint('control-plane/push/config-server.ts', "import { createProxyEngine } from '../../dataplane/engine.js';\nexport const x = createProxyEngine;\n")).toHaveLength(1);
    expect(await lint('control-plane/domain/databases/x.ts', "import type { DatabaseRepository } from './repository.js';\nexport type X = DatabaseRepository;\n")).toEqual([]);
  });

  it('keeps the domain free of the store: the store adapts the ports the domain owns', async () => {
    const msgs = await lint('control-plane/domain/databases/x.ts', "import { openStore } from '../../store/open.js';\nexport const x = openStore;\n");
    expect(msgs).toHaveLength(1);
    expect(msgs[0]).toMatch(/domain must not import control-plane\/store/);
    expect(await lint('control-plane/domain/x.ts', "import type { Db } from '../store/sqlite/database.js';\nexport type X = Db;\n")).toHaveLength(1);
    // The store implementing a port of the domain is the intended direction.
    expect(await lint('control-plane/store/sqlite/x.ts', "import type { DatabaseRepository } from '../../domain/databases/repository.js';\nexport type X = DatabaseRepository;\n")).toEqual([]);
  });

  it('keeps each store adapter to itself and to what both share', async () => {
    const pgFromSqlite = await lint('control-plane/store/postgres/x.ts', "import { nextSequenceId } from '../sqlite/core-repositories.js';\nexport const x = nextSequenceId;\n");
    expect(pgFromSqlite).toHaveLength(1);
    expect(pgFromSqlite[0]).toMatch(/store\/postgres must not import the sqlite adapter/);
    expect(await lint('control-plane/store/sqlite/x.ts', "import { pgSql } from '../postgres/executor.js';\nexport const x = pgSql;\n")).toHaveLength(1);
    expect(await lint('control-plane/store/common/x.ts', "import type { Db } from '../sqlite/database.js';\nexport type X = Db;\n")).toHaveLength(1);
    expect(await lint('control-plane/store/common/x.ts', "import { pgSql } from '../postgres/executor.js';\nexport const x = pgSql;\n")).toHaveLength(1);
    // Both adapters may use the shared rows and migrations.
    expect(await lint('control-plane/store/postgres/x.ts', "import { userRow } from '../common/rows.js';\nexport const x = userRow;\n")).toEqual([]);
    expect(await lint('control-plane/store/sqlite/x.ts', "import { migrations } from '../common/migrations.js';\nexport const x = migrations;\n")).toEqual([]);
  });

  it('allows no `any` in the store layer', async () => {
    const code = 'export const userRow = (r: any) => r.id as number;\n';
    expect(await lint('control-plane/store/common/x.ts', code, '@typescript-eslint/no-explicit-any')).toHaveLength(1);
    expect(await lint('control-plane/store/postgres/x.ts', code, '@typescript-eslint/no-explicit-any')).toHaveLength(1);
  });

  it('fails on an import cycle in product code, naming the chain', async () => {
    // lib/proxy-protocol.ts imports lib/ipv4.ts; ipv4.ts importing it back closes a cycle.
    const msgs = await lint('lib/ipv4.ts', "import { encodeProxyV1 } from './proxy-protocol.js';\nexport const x = encodeProxyV1;\n", 'fulcrum/no-import-cycle');
    expect(msgs).toEqual(['Import cycle: lib/ipv4.ts -> lib/proxy-protocol.ts -> lib/ipv4.ts']);
    // The same import from a file nothing imports back is fine.
    expect(await lint('lib/y.ts', "import { encodeProxyV1 } from './proxy-protocol.js';\nexport const x = encodeProxyV1;\n", 'fulcrum/no-import-cycle')).toEqual([]);
  });

  // A database's persisted state has one writer (docs/agent.md, "One writer"): the rule flags a
  // write planted anywhere else in the agent, in each form a write can take.
  it.each([
    ['agent/day-two.ts', 'export function f(c: { state?: { lastAutoBackupDay?: string } }) {\n  c.state!.lastAutoBackupDay = "2026-01-01";\n}\n'],
    ['agent/backup/x.ts', 'export function f(c: { state: { nextBackupId: number } }) {\n  const s = c.state;\n  s.nextBackupId++;\n}\n'],
    ['agent/database/failover.ts', 'export function f(db: { state: { rebuild: number[] } }) {\n  db.state.rebuild.push(2);\n}\n'],
    ['agent/database/x.ts', 'import type { DbState } from "./state.js";\nexport function f(s: DbState) {\n  delete s.errant;\n}\n'],
    ['agent/binlog/x.ts', 'export function f(c: { state: object }) {\n  Object.assign(c.state, { primary: 2 });\n}\n'],
    ['agent/agent.ts', 'export function f(c: { desired?: object }) {\n  c.desired = undefined;\n}\n'],
  ])('%s may not write a database\'s state or its controller\'s inputs', async (file, code) => {
    expect(await lint(file, code, 'agent/no-state-write')).toHaveLength(1);
  });

  it('lets the controller and the state module write the state, and everyone read it', async () => {
    const write = 'export function f(c: { state: { primary: number } }) {\n  c.state.primary = 2;\n}\n';
    expect(await lint('agent/database/controller.ts', write, 'agent/no-state-write')).toEqual([]);
    expect(await lint('agent/database/state.ts', write, 'agent/no-state-write')).toEqual([]);
    const read = 'export function f(c: { state: { primary: number } }, o: { primary: number }) {\n  o.primary = c.state.primary;\n}\n';
    expect(await lint('agent/database/failover.ts', read, 'agent/no-state-write')).toEqual([]);
  });

  it('finds no write of a database\'s state outside its controller anywhere in the agent', async () => {
    const results = await eslint.lintFiles(['agent']);
    expect(results.flatMap((r) => r.messages.filter((m) => m.ruleId === 'agent/no-state-write').map((m) => `${r.filePath}:${m.line}: ${m.message}`))).toEqual([]);
  });

  it('finds no import cycle and no boundary break anywhere in product code', async () => {
    const results = await eslint.lintFiles(['control-plane', 'dataplane', 'agent', 'lib', 'bin']);
    const broken = results.flatMap((r) =>
      r.messages
        .filter((m) => m.ruleId === 'fulcrum/no-import-cycle' || m.ruleId === 'no-restricted-imports')
        .map((m) => `${r.filePath}: ${m.message}`),
    );
    expect(broken).toEqual([]);
  }, 60_000);
});
