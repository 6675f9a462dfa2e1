import { createSocket, type Socket } from 'node:dgram';
import type { Logger } from '../../lib/logger.js';
import { policyEpoch } from '../native/policy-epoch.js';
import { udpRelay, udpRelayError, type UdpRelayAddon, type UdpRelayHandle } from '../native/udp-relay.js';
import { FastUdp, nativeHandle } from './udp-fast.js';

/**
 * The sockets of a udp listener's sessions (udp-listener.ts): node:dgram's, or the native relay's
 * (docs/dataplane.md "UDP: the native datagram path").
 */

/**
 * Every address sent to here is already an IP literal (a client's source, a validated node
 * address), so the name lookup dgram does before each send is answered at once. Node's default
 * goes through dns.lookup and a nextTick per datagram (docs/performance.md "UDP").
 */
export function literal(address: string, _family: unknown, callback: (err: Error | null, address: string, family: number) => void): void {
  callback(null, address, address.includes(':') ? 6 : 4);
}

/** Where a datagram came from: the two fields of dgram's RemoteInfo the listener reads. */
export interface Peer {
  readonly address: string;
  readonly port: number;
}

/** A session's socket towards its node. */
export interface SessionIo {
  /** To the connected node. */
  send(msg: Buffer): void;
  sendTo(msg: Buffer, port: number, host: string): void;
  disconnect(): void;
  close(): void;
}

/** A session socket on node:dgram (the fallback), connected to host:port when `connected`. */
export function dgramSessionIo(host: string, port: number, connected: boolean, onReply: (msg: Buffer, from: Peer) => void, onError: (e: Error) => void): SessionIo {
  const socket = createSocket({ type: host.includes(':') ? 'udp6' : 'udp4', lookup: literal });
  const out = new FastUdp(socket, onReply);
  // Binds to an ephemeral port and connects at once: the lookup above answers synchronously.
  if (connected) socket.connect(port, host);
  socket.on('error', (e: NodeJS.ErrnoException) => {
    // A connected socket hears the ICMP "port unreachable" of a node that is not listening; an
    // unconnected one never did. The datagram is lost either way and the session stays, as
    // before: health checks, not one refused datagram, decide that a node is down.
    if (e.code === 'ECONNREFUSED') return;
    onError(e);
  });
  return {
    send: (msg) => out.send(msg),
    sendTo: (msg, p, h) => out.sendTo(msg, p, h),
    disconnect: () => socket.disconnect(),
    close: () => socket.close(),
  };
}

/** Said once per process: the native path was wanted and is not there. */
let fallbackLogged = false;

export interface RelayHandlers {
  /** A client datagram the relay did not carry itself (a new flow, a session not established). */
  datagram(msg: Buffer, from: Peer): void;
  /** A datagram on session `id`'s socket that the relay did not carry itself. */
  reply(id: number, msg: Buffer, from: Peer): void;
  /** A socket error: session `id`'s, or the listening socket's (id 2^32-1). */
  error(id: number, errno: number): void;
}

/** One listener's native relay (native/udp_relay.c); ids are its session numbers. */
export class NativeRelay {
  private constructor(private readonly addon: UdpRelayAddon, private readonly r: UdpRelayHandle) {}

  /**
   * Hands a bound dgram socket to a new relay: node:dgram stops reading it, and the relay reads a
   * duplicate of it. The dgram socket stays open (it owns the original descriptor, and a worker's
   * came from the primary) until the listener closes it. Null, logged loudly, when the addon is
   * not there or the socket has no descriptor: the listener then stays on node:dgram.
   */
  static start(socket: Socket, log: Logger, on: RelayHandlers): NativeRelay | null {
    if (udpRelay === null) {
      if (!fallbackLogged) {
        fallbackLogged = true;
        log.error({ reason: udpRelayError }, 'udp: the native datagram path is NOT available; serving udp through node:dgram, at about twice the CPU per datagram (docs/dataplane.md "UDP: the native datagram path")');
      }
      return null;
    }
    const handle = nativeHandle(socket) as unknown as { fd?: number; recvStop?: () => number } | null;
    if (handle === null || typeof handle.fd !== 'number' || handle.fd < 0 || typeof handle.recvStop !== 'function') {
      log.error({ address: socket.address() }, 'udp: no descriptor for the native datagram path; this listener uses node:dgram');
      return null;
    }
    const r = udpRelay.create(
      handle.fd,
      policyEpoch,
      (msg, address, port) => on.datagram(msg, { address, port }),
      (id, msg, address, port) => on.reply(id, msg, { address, port }),
      (id, errno) => on.error(id, errno),
    );
    handle.recvStop();
    return new NativeRelay(udpRelay, r);
  }

  /** A session for the client `from` towards host:port: its id, or -errno. */
  open(from: Peer, host: string, port: number, connected: boolean): number {
    return this.addon.open(this.r, from.address, from.port, host, port, connected);
  }

  /** Session `id`'s socket; `closed` gets the bytes the relay carried and nobody collected yet. */
  io(id: number, closed: (rx: number, tx: number) => void): SessionIo {
    const { addon, r } = this;
    // A send's error is dropped, as node:dgram's is without a callback.
    return {
      send: (msg) => void addon.send(r, id, msg),
      sendTo: (msg, port, host) => void addon.send(r, id, msg, host, port),
      disconnect: () => void addon.disconnect(r, id),
      close: () => {
        const [rx, tx] = addon.close(r, id);
        closed(rx, tx);
      },
    };
  }

  /** A datagram to a client, from the listening socket. */
  reply(msg: Buffer, ip: string, port: number): void {
    this.addon.reply(this.r, msg, ip, port);
  }

  /** The relay carries session `id` both ways until the policy epoch moves (native/policy-epoch.ts). */
  establish(id: number): void {
    this.addon.establish(this.r, id, policyEpoch[0]!);
  }

  /** `[id, bytes in, bytes out, ...]` of the sessions the relay carried since the last call. */
  collect(): number[] {
    return this.addon.collect(this.r);
  }

  destroy(): void {
    this.addon.destroy(this.r);
  }
}
