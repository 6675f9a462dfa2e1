import type Docker from 'dockerode';
import { createWriteStream } from 'node:fs';
import type { Duplex, Readable, Writable } from 'node:stream';
import { frameAt } from './docker-frames.js';

export interface ExecIo {
  stdin?: NodeJS.ReadableStream;
  stdout?: NodeJS.WritableStream;
  /** An open file the output is copied into, left open (a container cannot take our descriptor). */
  stdoutFd?: number;
  env?: Record<string, string>;
  /** Once aborted, the program's output is cut (docker cannot stop an exec; removing its container does). */
  signal?: AbortSignal;
}

export interface ExecResult {
  exitCode: number;
  stdout: string;
  stderr: string;
}

/**
 * Runs a program in a running container without a shell (docker exec), the way a child process
 * would run: stdin piped in, stdout collected or streamed to `io.stdout` (ended afterwards, as
 * `pipe()` does for a child process), stderr collected. Rejects only when docker refuses to create
 * the exec (container gone or stopped); a missing program inside the container surfaces as exit
 * code 126/127 with docker's message in stderr, like a shell would report it.
 *
 * Docker multiplexes stdout and stderr on one connection (8-byte frame headers). The frames are
 * split here rather than with modem.demuxStream because a dump can be gigabytes: writing to a
 * slow `io.stdout` must pause the connection instead of buffering everything in memory.
 */
export async function dockerExec(
  container: Docker.Container,
  cmd: string[],
  opts: ExecIo & { user?: string } = {},
): Promise<ExecResult> {
  opts.signal?.throwIfAborted();
  const env = Object.entries(opts.env ?? {}).map(([k, v]) => `${k}=${v}`);
  const exec = await container.exec({
    Cmd: cmd,
    Env: env,
    User: opts.user,
    AttachStdin: Boolean(opts.stdin),
    AttachStdout: true,
    AttachStderr: true,
    Tty: false,
  });
  const stream = (await exec.start({ hijack: Boolean(opts.stdin), stdin: Boolean(opts.stdin) })) as Duplex;

  let stdout = '';
  let stderr = '';
  const sink: NodeJS.WritableStream | undefined = opts.stdout ?? (opts.stdoutFd !== undefined ? createWriteStream('', { fd: opts.stdoutFd, autoClose: false }) : undefined);
  const onStdout = (chunk: Buffer): boolean => {
    if (sink) return sink.write(chunk);
    stdout += chunk.toString();
    return true;
  };
  const onStderr = (chunk: Buffer): void => {
    stderr += chunk.toString();
  };

  if (opts.stdin) {
    const input = opts.stdin as Readable;
    // End of input half-closes the hijacked connection, which docker turns into EOF on stdin.
    input.pipe(stream);
  }

  const cut = () => stream.destroy();
  // A sink that fails (a full disk) or that its owner destroyed cuts the program's output, and
  // the run fails naming why: it would otherwise wait for a drain that never comes, and an
  // unlistened failure is an uncaught error that ends the agent.
  let sinkGone: string | undefined;
  const onSinkError = (err: Error) => {
    sinkGone = `output failed: ${err.message}`;
    cut();
  };
  const onSinkClose = () => {
    if ((sink as Writable).writableFinished) return;
    sinkGone ??= 'output closed before the program finished';
    cut();
  };
  sink?.on('error', onSinkError);
  sink?.once('close', onSinkClose);
  opts.signal?.addEventListener('abort', cut, { once: true });
  try {
    await demux(stream, onStdout, onStderr, sink);
  } finally {
    opts.signal?.removeEventListener('abort', cut);
  }
  // The sink's last write may fail only as it is ended (a short output into a full file).
  if (sink && !sinkGone) await endSink(sink);
  if (sinkGone) return { exitCode: 1, stdout, stderr: `${stderr}${sinkGone}\n` };
  if (opts.signal?.aborted) return { exitCode: 1, stdout, stderr: `${stderr}cancelled\n` };

  // The exec can report "running" for a moment after its stream closed.
  for (let i = 0; i < 100; i++) {
    const info = await exec.inspect();
    if (!info.Running) return { exitCode: info.ExitCode ?? 1, stdout, stderr };
    await new Promise((r) => setTimeout(r, 20));
  }
  throw new Error(`exec of ${cmd[0]} did not finish after its output closed`);
}

function demux(
  stream: Duplex,
  onStdout: (b: Buffer) => boolean,
  onStderr: (b: Buffer) => void,
  sink?: NodeJS.WritableStream,
): Promise<void> {
  return new Promise((resolve, reject) => {
    let pending: Buffer = Buffer.alloc(0);
    const onData = (chunk: Buffer) => {
      pending = pending.length ? Buffer.concat([pending, chunk]) : chunk;
      let ok = true;
      for (let f = frameAt(pending); f && f.end <= pending.length; f = frameAt(pending)) {
        const payload = pending.subarray(f.start, f.end);
        if (f.stream === 2) onStderr(payload);
        else ok = onStdout(payload) && ok;
        pending = pending.subarray(f.end);
      }
      if (!ok && sink) {
        stream.pause();
        sink.once('drain', () => stream.resume());
      }
    };
    stream.on('data', onData);
    stream.once('end', () => resolve());
    stream.once('close', () => resolve());
    // The program may exit before reading all of stdin; the broken pipe is not our failure.
    stream.once('error', (e: NodeJS.ErrnoException) => (e.code === 'EPIPE' || e.code === 'ECONNRESET' ? resolve() : reject(e)));
  });
}

function endSink(sink: NodeJS.WritableStream): Promise<void> {
  if (sink === process.stdout || sink === process.stderr) return Promise.resolve();
  return new Promise((resolve) => {
    sink.once('finish', () => resolve());
    sink.once('error', () => resolve());
    sink.end();
  });
}
