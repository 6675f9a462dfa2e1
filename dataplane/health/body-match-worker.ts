/**
 * The source of the check_body matching thread (dataplane/health/body-match.ts runs it with
 * `new Worker(WORKER_SOURCE, { eval: true })`), in a file of its own so the scheduler stays readable.
 */
// Plain JavaScript, evaluated in the worker: the same source under tsx and from dist/. It
// reports the match's CPU time (`process.threadCpuUsage`, Node 23.9 and later) or, where that
// is missing, its wall time on this thread, which is never less.
export const WORKER_SOURCE = `
const { parentPort, workerData } = require('node:worker_threads');
const started = new Int32Array(workerData);
const { performance } = require('node:perf_hooks');
const cpu = typeof process.threadCpuUsage === 'function'
  ? () => { const u = process.threadCpuUsage(); return (u.user + u.system) / 1000; }
  : () => performance.now();
const cache = new Map();
parentPort.on('message', (m) => {
  let re = cache.get(m.key);
  if (re === undefined) {
    try { re = new RegExp(m.source, m.flags); } catch { re = null; }
    if (cache.size >= 1024) cache.clear();
    cache.set(m.key, re);
  }
  Atomics.store(started, 0, m.seq);
  const t = cpu();
  const ok = re !== null && re.test(m.text);
  Atomics.store(started, 1, m.seq);
  parentPort.postMessage({ ok, ms: cpu() - t });
});
// 'online' comes before this script has run: a first match timed from then could overrun on a
// loaded machine before the regex even started.
parentPort.postMessage({ ready: true });
`;
