import { afterEach, beforeEach, describe, expect, it, vi } from 'vitest';
import { controlPlaneClient, reconnectingStream, type StreamAttempt, type StreamLoss } from '../../../lib/control-plane-client.js';
import { insecureChannel } from '../../../lib/grpc.js';

/** Channels that record what was dialled and calls that record being cancelled. */
function fakeStream(target: string) {
  const channels: { address: string; closed: boolean }[] = [];
  const attempts: { attempt: StreamAttempt; call: { cancelled: boolean; finished: boolean; cancel(): void } }[] = [];
  const losses: StreamLoss[] = [];
  let gone = 0;
  let ready: ((error?: Error) => void) | undefined;
  const client = controlPlaneClient(target, insecureChannel, (address) => {
    const c = {
      address,
      closed: false,
      close: () => (c.closed = true),
      // What grpc-js reports when the deadline passes (or the channel connects), told by the test.
      waitForReady: (_deadline: Date | number, cb: (error?: Error) => void) => (ready = cb),
    };
    channels.push(c);
    return c;
  });
  const stream = reconnectingStream({
    client,
    open: (_channel, attempt) => {
      const call = { cancelled: false, finished: false, cancel: () => (call.cancelled = true) };
      attempts.push({ attempt, call });
      return call;
    },
    onGone: () => gone++,
    onLost: (loss) => losses.push(loss),
  });
  return { stream, channels, attempts, losses, gone: () => gone, ready: (error?: Error) => ready?.(error) };
}

describe('reconnectingStream', () => {
  beforeEach(() => vi.useFakeTimers());
  afterEach(() => vi.useRealTimers());

  it('tries the next replica at once on a new channel and backs off only once every replica failed', async () => {
    const f = fakeStream('a:1,b:2');
    f.stream.start();
    expect(f.attempts).toHaveLength(1);
    expect(f.stream.call).toBe(f.attempts[0]!.call);
    f.attempts[0]!.attempt.lost('refused');
    f.attempts[0]!.attempt.lost('refused again'); // heard once per attempt
    expect(f.gone()).toBe(1);
    expect(f.stream.call).toBeNull();
    expect(f.losses).toEqual([{ why: 'refused', address: 'a:1', next: 'b:2', delay: 0, attempt: 0 }]);
    expect(f.channels[0]!.closed).toBe(true);
    await vi.advanceTimersByTimeAsync(0);
    expect(f.attempts).toHaveLength(2);
    expect(f.channels[1]!.address).toBe('b:2');

    f.attempts[1]!.attempt.lost('refused');
    expect(f.losses[1]!.delay).toBeGreaterThan(0);
    expect(f.losses[1]!.attempt).toBe(1);
    await vi.advanceTimersByTimeAsync(0);
    expect(f.attempts).toHaveLength(2);
    await vi.advanceTimersByTimeAsync(f.losses[1]!.delay);
    expect(f.attempts).toHaveLength(3);
    expect(f.channels[2]!.address).toBe('a:1');
  });

  it('starts backoff and the round again once a stream held', async () => {
    const f = fakeStream('a:1');
    f.stream.start();
    f.attempts[0]!.attempt.lost('refused');
    await vi.advanceTimersByTimeAsync(f.losses[0]!.delay);
    f.attempts[1]!.attempt.lost('refused');
    expect(f.losses[1]!.attempt).toBe(2);
    await vi.advanceTimersByTimeAsync(f.losses[1]!.delay);
    f.attempts[2]!.attempt.held();
    f.attempts[2]!.attempt.lost('control plane restarted');
    expect(f.losses[2]!.attempt).toBe(1);
    // An old attempt is no longer current: what it reports changes nothing.
    f.attempts[0]!.attempt.held();
    expect(f.attempts[0]!.attempt.current()).toBe(false);
  });

  it('cancels an attempt whose channel did not connect in time, and not one that did', async () => {
    const f = fakeStream('a:1');
    f.stream.start();
    f.ready(new Error('Deadline passed'));
    expect(f.attempts[0]!.call.cancelled).toBe(true);
    f.attempts[0]!.attempt.lost('cancelled');
    await vi.advanceTimersByTimeAsync(f.losses[0]!.delay);
    f.ready();
    expect(f.attempts[1]!.call.cancelled).toBe(false);
  });

  it('reconnect cancels the call in use; close finishes it, closes the channel and opens nothing more', async () => {
    const f = fakeStream('a:1');
    f.stream.start();
    f.stream.reconnect();
    expect(f.attempts[0]!.call.cancelled).toBe(true);
    f.attempts[0]!.attempt.lost('cancelled');
    await vi.advanceTimersByTimeAsync(f.losses[0]!.delay);
    const finished: unknown[] = [];
    f.stream.close((call) => finished.push(call));
    expect(finished).toEqual([f.attempts[1]!.call]);
    expect(f.channels[1]!.closed).toBe(true);
    f.attempts[1]!.attempt.lost('cancelled');
    await vi.advanceTimersByTimeAsync(60_000);
    expect(f.attempts).toHaveLength(2);
    expect(f.losses).toHaveLength(1);
  });
});
