/**
 * Full-jitter exponential backoff for reconnect loops: a fleet of data planes and agents that
 * lost the control plane together must not reconnect in lock step.
 */
export function backoffDelay(attempt: number, baseMs = 250, maxMs = 10_000, random: () => number = Math.random): number {
  const cap = Math.min(maxMs, baseMs * 2 ** Math.min(attempt, 16));
  return Math.floor(random() * cap) + Math.min(baseMs, cap) / 2;
}
