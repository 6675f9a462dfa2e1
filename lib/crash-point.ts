/**
 * Crash points for tests (docs/testing.md, "Crash points"): when the process was started with
 * FULCRUM_CRASH_AT naming this point, it kills itself with SIGKILL here, as an OOM kill or a
 * power cut would at that instant, so a test can check what the next start makes of it. The
 * variable is never set outside tests; unset, a crash point does nothing.
 */
export function crashPoint(name: string): void {
  if (process.env.FULCRUM_CRASH_AT === name) process.kill(process.pid, 'SIGKILL');
}
