import { describe, expect, it } from 'vitest';
import { CONNECT_TIMEOUT_MS, abandonUnlessConnected, controlPlaneAddresses, controlPlaneClient, hostOf } from '../../../lib/control-plane-client.js';
import { insecureChannel } from '../../../lib/grpc.js';

describe('controlPlaneAddresses', () => {
  it('takes one address, a comma list or an array', () => {
    expect(controlPlaneAddresses('10.0.0.1:8081')).toEqual(['10.0.0.1:8081']);
    expect(controlPlaneAddresses(' cp1.example:8081, cp2.example:8081 ,')).toEqual(['cp1.example:8081', 'cp2.example:8081']);
    expect(controlPlaneAddresses(['[::1]:8081', '127.0.0.1:9'])).toEqual(['[::1]:8081', '127.0.0.1:9']);
  });

  it('names the entry that is not host:port', () => {
    expect(() => controlPlaneAddresses('10.0.0.1:8081,10.0.0.2')).toThrow(/"10.0.0.2" is not host:port/);
    expect(() => controlPlaneAddresses('10.0.0.1:0')).toThrow(/"10.0.0.1:0"/);
    expect(() => controlPlaneAddresses('10.0.0.1:70000')).toThrow(/"10.0.0.1:70000"/);
    expect(() => controlPlaneAddresses('')).toThrow(/at least one/);
    expect(() => controlPlaneAddresses(Array.from({ length: 17 }, (_, i) => `h${i}:1`))).toThrow(/at most 16/);
  });

  it('finds the host of an address', () => {
    expect(hostOf('[::1]:8081')).toBe('::1');
    expect(hostOf('cp.example:8081')).toBe('cp.example');
  });
});

describe('controlPlaneClient', () => {
  const fake = () => {
    const made: { address: string; closed: boolean }[] = [];
    const client = controlPlaneClient('a:1,b:2,c:3', insecureChannel, (address) => {
      const c = { address, closed: false, close: () => (c.closed = true) };
      made.push(c);
      return c;
    });
    return { made, client };
  };

  it('keeps one channel while it works and dials the next replica on a fresh channel after a failure', () => {
    const { made, client } = fake();
    expect(client.get().address).toBe('a:1');
    expect(client.get()).toBe(made[0]);
    expect(client.failed()).toBe(false);
    expect(made[0]!.closed).toBe(true);
    expect(client.get().address).toBe('b:2');
    expect(client.failed()).toBe(false);
    // The whole list failed: back off now.
    expect(client.failed()).toBe(true);
    expect(client.get().address).toBe('a:1');
    expect(made).toHaveLength(3);
  });

  it('starts a new round after a success', () => {
    const { client } = fake();
    client.get();
    expect(client.failed()).toBe(false);
    client.succeeded();
    expect(client.failed()).toBe(false);
    expect(client.failed()).toBe(false);
    expect(client.failed()).toBe(true);
  });

  it('backs off after every failure with a single address', () => {
    const client = controlPlaneClient('a:1', insecureChannel, () => ({ close: () => undefined }));
    client.get();
    expect(client.failed()).toBe(true);
    expect(client.address).toBe('a:1');
  });
});

describe('abandonUnlessConnected', () => {
  /** A channel whose waitForReady answers when the test says, remembering the deadline it got. */
  const channel = () => {
    const c = {
      deadline: 0,
      answer: (_err?: Error) => undefined as void,
      waitForReady(deadline: Date | number, callback: (error?: Error) => void) {
        c.deadline = Number(deadline);
        c.answer = callback;
      },
    };
    return c;
  };

  it('cancels the call when its channel is not connected by the deadline', () => {
    const ch = channel();
    let cancelled = 0;
    const before = Date.now();
    abandonUnlessConnected(ch, { cancel: () => cancelled++ }, () => true);
    expect(ch.deadline).toBeGreaterThanOrEqual(before + CONNECT_TIMEOUT_MS);
    expect(ch.deadline).toBeLessThanOrEqual(Date.now() + CONNECT_TIMEOUT_MS);
    ch.answer(new Error('Failed to connect before the deadline'));
    expect(cancelled).toBe(1);
  });

  it('leaves a call that connected, or one no longer in use, alone', () => {
    const connected = channel();
    const replaced = channel();
    let cancelled = 0;
    const heard: string[] = [];
    abandonUnlessConnected(connected, { cancel: () => cancelled++ }, () => true, { onConnected: () => heard.push('connected') });
    const before = Date.now();
    abandonUnlessConnected(replaced, { cancel: () => cancelled++ }, () => false, { timeoutMs: 100, onConnected: () => heard.push('replaced') });
    expect(replaced.deadline).toBeLessThanOrEqual(Date.now() + 100);
    expect(replaced.deadline).toBeGreaterThanOrEqual(before + 100);
    connected.answer();
    replaced.answer(new Error('The channel has been closed'));
    expect(cancelled).toBe(0);
    expect(heard).toEqual(['connected']);
  });
});
