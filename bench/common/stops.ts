/**
 * What a bench started that its process group does not cover (network namespaces, veths and
 * bridges, iptables rules, mariadbd processes the agent starts in sessions of their own, docker
 * containers, temp folders, an object store), and how to stop it, whichever way the bench ends.
 *
 * A part registers the stop its normal end runs (`onStop`) and calls the function it gets back
 * in its finally; a signal, an uncaught error or the end of `main` run every stop still
 * registered, newest first, through the same function, so each one runs once whichever path
 * reaches it first. The signal path is bounded (`STOP_BOUND_MS`), and a second signal exits at
 * once: the supervisor (processes.ts, superviseInOwnGroup) then stops the process group.
 */

interface Stop {
  what: string;
  run(): Promise<void>;
}

/** Registered and not yet finished, in registration order (a Set keeps it). */
const pending = new Set<Stop>();
let exiting: { code: number } | undefined;

/** How long a bench may take to stop what it started after a signal or a failure. */
export const STOP_BOUND_MS = 90_000;

/**
 * Registers how to stop something the bench has just started. Returns the stop itself, to call at
 * the normal end (in a finally): it runs once, and a signal meanwhile waits for that same run.
 * Registered while the bench is already stopping (a part that kept going after a signal), it
 * runs at once.
 */
export function onStop(what: string, stop: () => Promise<void>): () => Promise<void> {
  let running: Promise<void> | undefined;
  const entry: Stop = {
    what,
    run: () => (running ??= stop().finally(() => pending.delete(entry))),
  };
  pending.add(entry);
  if (exiting) void entry.run().catch(() => undefined);
  return entry.run;
}

/** True once a signal or a failure has started stopping the bench: start nothing new. */
export function stopping(): boolean {
  return exiting !== undefined;
}

/** What is still registered, newest first (the order they run in), for the bench's last message. */
export function registeredStops(): string[] {
  return [...pending].reverse().map((s) => s.what);
}

/** Runs every registered stop, newest first, until none is left; the ones that failed. */
async function runPending(): Promise<string[]> {
  const failed: string[] = [];
  const tried = new Set<Stop>();
  for (;;) {
    const next = [...pending].reverse().find((s) => !tried.has(s));
    if (!next) return failed;
    tried.add(next);
    try {
      await next.run();
    } catch (err) {
      failed.push(`${next.what}: ${(err as Error).message}`);
    }
  }
}

/**
 * Stops everything the bench registered, then runs `last` (the tracked child processes), within
 * `boundMs`, and exits with `code`. Called from every way out; the first call decides the code,
 * and later calls return at once (the first one exits).
 */
export async function stopAndExit(label: string, code: number, last: () => Promise<void>, boundMs = STOP_BOUND_MS): Promise<void> {
  if (exiting) return;
  exiting = { code };
  let timer: NodeJS.Timeout | undefined;
  const bounded = new Promise<'late'>((resolve) => (timer = setTimeout(() => resolve('late'), boundMs)));
  const done = (async () => {
    const failed = await runPending();
    await last();
    return failed;
  })();
  const result = await Promise.race([done, bounded]);
  clearTimeout(timer);
  if (result === 'late') {
    process.stderr.write(`${label}: stopping took over ${boundMs / 1000} s; exiting with these still stopping: ${registeredStops().join('; ') || '(tracked child processes)'}\n`);
  } else if (result.length > 0) {
    process.stderr.write(`${label}: could not stop: ${result.join('; ')}\n`);
  }
  process.exit(exiting.code);
}

const SIGNAL_CODES = { SIGINT: 130, SIGTERM: 143 } as const;

/**
 * SIGINT/SIGTERM: stop what the bench started (bounded), then exit 130/143; the same signal a
 * second time exits at once. An uncaught error stops it the same way and exits 1.
 */
export function stopOnSignals(label: string, last: () => Promise<void>, boundMs = STOP_BOUND_MS): void {
  for (const sig of ['SIGINT', 'SIGTERM'] as const) {
    process.on(sig, () => {
      if (exiting) {
        process.stderr.write(`\n${label}: ${sig} again: exiting without waiting for the stops\n`);
        process.exit(exiting.code);
      }
      process.stderr.write(`\n${label}: ${sig}: stopping what the bench started (at most ${boundMs / 1000} s; ${sig} again to exit at once)\n`);
      void stopAndExit(label, SIGNAL_CODES[sig], last, boundMs);
    });
  }
  const uncaught = (err: unknown) => {
    // While stopping, what is being torn down fails under the code still using it: expected.
    if (exiting) return;
    process.stderr.write(`${label}: uncaught: ${(err as Error)?.stack ?? String(err)}\n`);
    void stopAndExit(label, 1, last, boundMs);
  };
  process.on('uncaughtException', uncaught);
  process.on('unhandledRejection', uncaught);
}
