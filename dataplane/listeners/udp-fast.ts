import type { RemoteInfo, Socket } from 'node:dgram';
import { getSystemErrorName } from 'node:util';

/**
 * The per-datagram path of a `dgram.Socket`, past node:dgram's JavaScript layer, straight onto
 * the socket's native handle (docs/performance.md "UDP: past node:dgram's JavaScript layer").
 *
 * Why: every datagram our udp listener forwards is one read and one send. Through the public API
 * a read is an `EventEmitter.emit` of `'message'`, and a send is argument parsing, a closure, an
 * async-id scope and a new native `SendWrap` object (a construct call into C++) that only matters
 * when the kernel cannot take the datagram at once. Profiled, that layer was about 6% of the data
 * plane's CPU per datagram. Here a read calls our function directly from the handle's
 * `onmessage`, and a send calls the handle's `send` with one request object reused for as long
 * as sends complete synchronously (the native side wraps the request only for a send it has to
 * queue, src/udp_wrap.cc `UDPWrap::Send`; after one, the next send takes a fresh request).
 *
 * What it leans on, all of Node's own internals, checked once when a socket starts listening
 * (and by udp-fast.test.ts on the Node we run): the socket's state under the symbol described
 * 'state symbol', its `handle` with `onmessage(nread, handle, buffer, rinfo)` and
 * `send(req, list, count, [port, address,] hasCallback)`, and `SendWrap` from
 * `process.binding('udp_wrap')`. When any of them is missing, the socket is used through the
 * public API as before: slower, never wrong.
 *
 * Behaviour is the public API's, but for send errors: on both paths a refused send is counted
 * and its datagram dropped, never emitted as the socket's `'error'` (which without a listener
 * would throw into the event loop); a read error still reaches `'error'` through node:dgram's
 * own handler.
 */

type OnMessage = (nread: number, handle: NativeUdp, buffer: Buffer, rinfo: RemoteInfo) => void;

interface NativeUdp {
  onmessage: OnMessage;
  send(req: object, list: Buffer[], count: number, ...rest: [boolean] | [number, string, boolean]): number;
}

type SendWrapCtor = new () => { list?: Buffer[] };

function loadSendWrap(): SendWrapCtor | null {
  try {
    const binding = (process as unknown as { binding(name: string): { SendWrap?: unknown } }).binding('udp_wrap');
    return typeof binding.SendWrap === 'function' ? (binding.SendWrap as SendWrapCtor) : null;
  } catch {
    return null;
  }
}

const SendWrap = loadSendWrap();
/** The request object handed to every synchronous send; replaced after one that queued. */
let req = SendWrap === null ? null : new SendWrap();

/** The native handle of a bound socket, or null when this Node does not look as expected. */
export function nativeHandle(socket: Socket): NativeUdp | null {
  const symbol = Object.getOwnPropertySymbols(socket).find((s) => s.description === 'state symbol');
  if (symbol === undefined) return null;
  const handle = (socket as unknown as Record<symbol, { handle?: Partial<NativeUdp> } | undefined>)[symbol]?.handle;
  if (handle === undefined || handle === null || typeof handle.onmessage !== 'function' || typeof handle.send !== 'function') return null;
  return handle as NativeUdp;
}

/**
 * Sends the kernel refused on this process's JavaScript udp path, by error code. A refused send
 * loses its datagram, as UDP may; it is counted (`fulcrum_dataplane_udp_send_errors_total`),
 * never thrown or emitted. The codes are a fixed set, so a peer cannot grow the label set.
 */
const sendErrors = new Map<string, number>();
const SEND_ERROR_CODES = new Set(['EAGAIN', 'ENOBUFS', 'EMSGSIZE', 'ECONNREFUSED', 'EHOSTUNREACH', 'ENETUNREACH', 'EPERM', 'EACCES', 'EINVAL']);

function countSendError(code: string | undefined): void {
  const key = code !== undefined && SEND_ERROR_CODES.has(code) ? code : 'other';
  sendErrors.set(key, (sendErrors.get(key) ?? 0) + 1);
}

/** Sends refused so far in this process, by code (scraped by telemetry/metrics.ts). */
export function udpSendErrors(): ReadonlyMap<string, number> {
  return sendErrors;
}

/**
 * The public API's send callback: with one, node:dgram hands a send's error to it instead of
 * emitting 'error' on the socket. One function for every send, so no closure per datagram.
 */
function onSent(err: Error | null): void {
  if (err) countSendError((err as NodeJS.ErrnoException).code);
}

/**
 * Sends one buffer on a native handle; an error is counted. Only a send refused at once is seen:
 * one libuv had to queue (the socket's buffer full) and that fails later is dropped uncounted, as
 * a send without a callback is, which keeps the request object free of a completion per datagram.
 */
function sendOn(handle: NativeUdp, buffer: Buffer, port: number, address: string | null): void {
  const list = [buffer];
  const r = address === null ? handle.send(req!, list, 1, false) : handle.send(req!, list, 1, port, address, false);
  if (r < 0) countSendError(getSystemErrorName(r));
  // r > 0: the kernel took it (its length + 1) and the request was never wrapped. r === 0: it
  // was queued, wrapped in a native send request, which must keep the buffer alive until it
  // completes. r < 0: an error, as a send without a callback drops. After 0 (and an error, to be
  // safe) the next send takes a fresh request object.
  if (r <= 0) {
    req!.list = list;
    req = new SendWrap!();
  }
}

/** Whether sockets on this Node take the fast path (tests; docs/performance.md). */
export const fastPathAvailable = SendWrap !== null;

/**
 * One socket's reads and sends. `onMessage` gets every datagram the socket reads; `send` and
 * `sendTo` are `socket.send(buffer)` and `socket.send(buffer, port, address)`. Until the socket
 * is listening (bound), and on a Node whose internals differ, both go through the public API.
 */
export class FastUdp {
  private handle: NativeUdp | null = null;
  // A plain field, not a parameter property: this file is also loaded as TypeScript by Node's
  // own type stripping, in udp-fast.test.ts's child process.
  private readonly socket: Socket;

  constructor(socket: Socket, onMessage: (msg: Buffer, from: RemoteInfo) => void) {
    this.socket = socket;
    // dgram emits 'listening' right after it points the handle's onmessage at its own handler and
    // starts reading (also for a handle passed in from the primary), before any datagram is read.
    socket.once('listening', () => {
      const handle = SendWrap === null ? null : nativeHandle(socket);
      if (handle === null) {
        socket.on('message', onMessage);
        return;
      }
      const dgramOnMessage = handle.onmessage;
      handle.onmessage = (nread, h, buffer, rinfo) => {
        // A read error: node:dgram's own handler turns it into the socket's 'error' event.
        if (nread < 0) dgramOnMessage(nread, h, buffer, rinfo);
        else onMessage(buffer, rinfo);
      };
      this.handle = handle;
    });
  }

  /** Whether this socket reads and sends past node:dgram's JavaScript layer (tests). */
  get fast(): boolean {
    return this.handle !== null;
  }

  /** To the connected peer. */
  send(buffer: Buffer): void {
    if (this.handle !== null) sendOn(this.handle, buffer, 0, null);
    else this.socket.send(buffer, onSent);
  }

  /** To `address` (an IP literal) and `port`, on an unconnected socket. */
  sendTo(buffer: Buffer, port: number, address: string): void {
    if (this.handle !== null) sendOn(this.handle, buffer, port, address);
    else this.socket.send(buffer, port, address, onSent);
  }
}
