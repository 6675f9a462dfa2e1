import { defineConfig } from 'vitest/config';

// Projects, one per layer of the test pyramid, plus the attacks of the security suite:
// unit has no sockets, integration runs real servers on 127.x and port 0,
// e2e starts the whole lab and drives it with real clients.
// The projects that start real database servers fail a file that leaves one running
// (test/helpers/server-leak-guard.ts, docs/testing.md "Leaked servers").
const leakGuard = ['test/helpers/server-leak-guard.ts'];

export default defineConfig({
  test: {
    projects: [
      { test: { name: 'unit', include: ['test/unit/**/*.test.ts'], testTimeout: 10_000 } },
      {
        test: {
          name: 'integration',
          include: ['test/integration/**/*.test.ts'],
          setupFiles: leakGuard,
          testTimeout: 60_000,
          hookTimeout: 60_000,
        },
      },
      {
        // One test per attack in docs/security.md: each performs it against real processes and
        // must see it refused.
        test: {
          name: 'security',
          include: ['test/security/**/*.test.ts'],
          setupFiles: leakGuard,
          testTimeout: 120_000,
          hookTimeout: 120_000,
        },
      },
      {
        // How many e2e files run at once is a run-wide option, not a project one (vitest ignores
        // `fileParallelism` here): scripts/test-e2e.sh runs the serial lane with
        // --no-file-parallelism beside the concurrent lane, files marked
        // `// e2e-lane: concurrent`, with --maxWorkers 2 (docs/testing.md).
        test: {
          name: 'e2e',
          include: ['test/e2e/**/*.test.ts'],
          setupFiles: leakGuard,
          testTimeout: 180_000,
          hookTimeout: 180_000,
        },
      },
    ],
  },
});
