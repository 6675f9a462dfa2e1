import tseslint from 'typescript-eslint';
import noImportCycle from './scripts/eslint/no-import-cycle.js';
import noStateWrite from './scripts/eslint/no-state-write.js';

// The three processes talk only over gRPC; a direct import between them would couple
// their deployments, so it is an error. All of them may import lib/ and proto/gen.
const processRule = (self, o) => ({
  group: [`**/${o}/*`, `**/${o}`],
  message: `${self} must not import ${o}: processes share only lib/ and proto/.`,
});
const boundary = (self, others, extra = []) => ({
  files: [`${self}/**/*.ts`],
  rules: {
    'no-restricted-imports': ['error', { patterns: [...others.map((o) => processRule(self, o)), ...extra] }],
  },
});

// Product code: the three processes, the shared kernel and the CLI. Tests and benches may import
// across processes (they start them side by side) and are not checked for cycles.
const productRoots = ['control-plane', 'dataplane', 'agent', 'lib', 'bin'];

export default tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'proto/gen/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
  // The store answers asynchronously (control-plane/domain/ports.ts): a promise nobody awaits is
  // a write that may fail unseen or land after the answer, so the control plane must await or
  // explicitly hand off every one. Type-aware, hence only here.
  {
    files: ['control-plane/**/*.ts'],
    languageOptions: { parserOptions: { projectService: true, tsconfigRootDir: import.meta.dirname } },
    rules: {
      '@typescript-eslint/no-floating-promises': 'error',
      '@typescript-eslint/no-misused-promises': 'error',
    },
  },
  boundary('control-plane', ['dataplane', 'agent']),
  // The domain is what the API is a view of: business rules must not depend on the wire format.
  // It owns the repository ports (domain/ports.ts, domain/*/repository.ts) that store/ adapts:
  // the arrow runs from the store to the domain, never back.
  boundary('control-plane/domain', ['dataplane', 'agent'], [
    { group: ['**/api/*', '**/api'], message: 'control-plane/domain must not import control-plane/api: the API depends on the domain, not the reverse.' },
    { group: ['**/store/*', '**/store'], message: 'control-plane/domain must not import control-plane/store: the store adapts the domain\'s ports, not the reverse.' },
  ]),
  // The push servers are adapters: they translate between the gRPC streams and the domain
  // (docs/architecture.md, "Who owns what"). Storage and its transactions are the domain's, so a
  // push server that imports from the store or opens a transaction is an error.
  {
    files: ['control-plane/push/*-server.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [
        ...['dataplane', 'agent'].map((o) => processRule('control-plane', o)),
        { group: ['**/store/*', '**/store'], message: 'A push server only translates: it must not import control-plane/store; call a domain service.' },
      ] }],
      'no-restricted-syntax': ['error', {
        selector: "CallExpression[callee.property.name='transaction']",
        message: 'A push server only translates: it must not run a transaction; the domain service it calls does.',
      }],
    },
  },
  // The store's adapters (docs/architecture.md, "The store"): each dialect imports only what
  // both share (store/common: rows, columns, migrations), never the other adapter, and
  // store/common imports neither. Rows are typed there, so `any` has no place in the store.
  ...[['sqlite', ['postgres']], ['postgres', ['sqlite']], ['common', ['sqlite', 'postgres']]].map(([self, others]) => ({
    files: [`control-plane/store/${self}/**/*.ts`],
    rules: {
      'no-restricted-imports': ['error', { patterns: [
        ...['dataplane', 'agent'].map((o) => processRule('control-plane', o)),
        ...others.map((o) => ({
          group: [`**/store/${o}/*`, `../${o}/*`],
          message: `control-plane/store/${self} must not import the ${o} adapter: what both dialects share lives in store/common.`,
        })),
      ] }],
    },
  })),
  {
    files: ['control-plane/store/**/*.ts'],
    rules: { '@typescript-eslint/no-explicit-any': 'error' },
  },
  boundary('dataplane', ['control-plane', 'agent']),
  boundary('agent', ['control-plane', 'dataplane']),
  // The web console runs in a browser and knows Fulcrum only through the public HTTP API.
  {
    files: ['console/**/*.ts', 'console/**/*.tsx'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['**/control-plane/*', '**/dataplane/*', '**/agent/*', '**/lib/*', '**/proto/*'], message: 'console/ talks to Fulcrum only over the /v4 API.' }] }],
    },
  },
  {
    files: ['lib/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['**/control-plane/*', '**/dataplane/*', '**/agent/*'], message: 'lib/ is the shared kernel and depends on no process.' }] }],
    },
  },
  {
    files: productRoots.map((r) => `${r}/**/*.ts`),
    plugins: { fulcrum: { rules: { 'no-import-cycle': noImportCycle } } },
    rules: { 'fulcrum/no-import-cycle': ['error', { roots: productRoots }] },
  },
  // A database's persisted state has one writer, its controller (docs/agent.md, "One writer"):
  // the rest of the agent hands it changes instead of assigning fields.
  {
    files: ['agent/**/*.ts'],
    ignores: ['agent/database/controller.ts', 'agent/database/cluster.ts', 'agent/database/state.ts'],
    plugins: { agent: { rules: { 'no-state-write': noStateWrite } } },
    rules: { 'agent/no-state-write': 'error' },
  },
);
