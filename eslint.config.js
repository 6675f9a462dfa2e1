import tseslint from 'typescript-eslint';

// The three processes talk only over gRPC; a direct import between them would couple
// their deployments, so it is an error. All of them may import lib/ and proto/gen.
const boundary = (self, others) => ({
  files: [`${self}/**/*.ts`],
  rules: {
    'no-restricted-imports': [
      'error',
      {
        patterns: others.map((o) => ({
          group: [`**/${o}/*`, `**/${o}`],
          message: `${self} must not import ${o}: processes share only lib/ and proto/.`,
        })),
      },
    ],
  },
});

export default tseslint.config(
  { ignores: ['node_modules/**', 'dist/**', 'proto/gen/**'] },
  ...tseslint.configs.recommended,
  {
    rules: {
      '@typescript-eslint/no-unused-vars': ['error', { argsIgnorePattern: '^_', varsIgnorePattern: '^_' }],
      '@typescript-eslint/no-explicit-any': 'off',
    },
  },
  boundary('control-plane', ['dataplane', 'agent']),
  boundary('dataplane', ['control-plane', 'agent']),
  boundary('agent', ['control-plane', 'dataplane']),
  {
    files: ['lib/**/*.ts'],
    rules: {
      'no-restricted-imports': ['error', { patterns: [{ group: ['**/control-plane/*', '**/dataplane/*', '**/agent/*'], message: 'lib/ is the shared kernel and depends on no process.' }] }],
    },
  },
);
