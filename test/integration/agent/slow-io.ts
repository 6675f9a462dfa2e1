/**
 * What the agent tests that race a physical base copy share: a writer as slow as a slow disk,
 * and the processes of a program working on a test's folder.
 */
import { readdirSync, readFileSync } from 'node:fs';
import { Writable } from 'node:stream';

/**
 * A sink that takes about `bytesPerS` while `slowNow()`: its writer blocks on it as on a slow
 * disk. The wrapped stream is dropped only when this one fails (a descriptor it writes to may
 * be read after it finished).
 */
export function slowSink(inner: NodeJS.WritableStream, bytesPerS: number, slowNow: () => boolean = () => true): Writable {
  const sink = new Writable({
    highWaterMark: 16 * 1024,
    write(chunk: Buffer, _enc, cb) {
      inner.write(chunk, (err) => (err ? cb(err) : setTimeout(() => cb(), slowNow() ? (chunk.length * 1000) / bytesPerS : 0)));
    },
    final(cb) {
      inner.end(() => cb());
    },
    destroy(err, cb) {
      // The wrapped stream is no part of its writer's pipeline: the error is this one's to report.
      if (err) (inner as Writable).destroy();
      cb(err);
    },
  });
  // The wrapped stream's own errors are this one's: a file write still under way when the
  // caller destroyed this sink ends in ERR_STREAM_DESTROYED on the file stream, which nothing
  // else listens to, and was an uncaught exception in the test process once in CI.
  inner.on('error', (err: Error) => sink.destroy(err));
  return sink;
}

/** Processes of `program` whose command line names `path` (ours: they run on this test's folder). */
export function processesOf(program: string, path: string): number[] {
  const out: number[] = [];
  for (const pid of readdirSync('/proc')) {
    if (!/^\d+$/.test(pid)) continue;
    try {
      const args = readFileSync(`/proc/${pid}/cmdline`, 'utf8').split('\0');
      if (args[0]?.endsWith(program) && args.some((a) => a.includes(path))) out.push(Number(pid));
    } catch {
      // Gone meanwhile.
    }
  }
  return out;
}
