import cluster from 'node:cluster';
import { createSocket, type Socket } from 'node:dgram';
import type { Clock, Timer } from '../../lib/clock.js';
import type { Logger } from '../../lib/logger.js';
import { hashString } from '../balancing/picker.js';
import type { ConfigRuntime } from '../runtime/config-runtime.js';
import type { NodeState } from '../runtime/node-state.js';
import type { ConnLimits } from '../throttle/conn-limits.js';
import { bumpPolicyEpoch } from '../native/policy-epoch.js';
import { FastUdp } from './udp-fast.js';
import { dgramSessionIo, literal, NativeRelay, type Peer, type SessionIo } from './udp-session-io.js';

/** How often expired sessions are looked for, at most (a shorter session timeout sweeps more often). */
const SWEEP_MS = 1000;
/** Asked of the kernel for the listening socket, so a burst is not dropped before we read it. */
const SOCKET_BUFFER = 4 * 1024 * 1024;
/**
 * Reflection (docs/security/traffic.md "UDP"): a source address is not proven, so until the
 * client has sent a second datagram a session passes at most this many reply datagrams and bytes.
 * One spoofed datagram then buys a victim at most 4 datagrams and 8 KiB from any backend: room for
 * a DNS answer (EDNS buffers stop at 4 KiB) or a QUIC server's first flight (3x the client's
 * 1,200-byte Initial), not for a stream.
 */
const UNCONFIRMED_REPLY_DATAGRAMS = 4;
const UNCONFIRMED_REPLY_BYTES = 8 * 1024;

/** One client flow (source address and port): its own socket towards the node, and its node. */
interface UdpSession {
  readonly flow: string;
  readonly ip: string;
  readonly port: number;
  /** What the per-client limits counted this session under (lib/client-key.ts). */
  readonly key: string;
  /** Datagrams from the client, counted up to 2: below that, replies are bounded (UNCONFIRMED_*). */
  fromClient: number;
  /** Reply datagrams and bytes passed while `fromClient` was 1. */
  unconfirmedReplies: number;
  unconfirmedBytes: number;
  readonly rt: ConfigRuntime;
  readonly io: SessionIo;
  /** The native relay's number for this session, -1 on node:dgram. */
  readonly id: number;
  node: NodeState;
  /** The node the last datagram went to: a reply from it is recognised without building a key. */
  sentTo: NodeState | null;
  /** Node addresses (`host:port`) this session sent to: the only sources a reply is taken from. */
  readonly peers: Set<string>;
  /**
   * True while the socket is connected to `node`, the only node the session has used: sends
   * carry no address and the kernel drops datagrams from anyone else, so a reply needs no check.
   * The first move to another node disconnects it for good (replies from every node in `peers`
   * are still taken, as before).
   */
  connected: boolean;
  lastSeen: number;
  ended: boolean;
}

/**
 * A udp config's listening socket (docs/dataplane.md "UDP"). Each client flow is a session bound
 * to one node until `udp_session_timeout` of silence either way; the session talks to the node
 * from its own socket, and replies go back to the client from this socket, so the client sees
 * the NodeBalancer's address. Datagrams are forwarded one by one as they arrive: never
 * reassembled, reordered or held back. Which config is served is the `rt` pointer, as for TCP.
 */
export class UdpListener {
  readonly socket: Socket;
  /** The listening socket's reads, and its replies to clients (udp-fast.ts). */
  private readonly io: FastUdp;
  /** The config served; a change sends natively relayed sessions back through the policy. */
  get rt(): ConfigRuntime | null {
    return this.current;
  }

  set rt(v: ConfigRuntime | null) {
    if (v !== this.current) bumpPolicyEpoch();
    this.current = v;
  }
  /**
   * Sessions by client address, then port: a datagram finds its flow with the two values the
   * 'message' event already gives, without building an `ip:port` string per datagram.
   */
  private readonly sessions = new Map<string, Map<number, UdpSession>>();
  private count = 0;
  private sweeper: Timer | null = null;
  private closed = false;
  /**
   * The native datagram path (native/udp_relay.c), when it serves this listener: it owns a
   * duplicate of the listening socket and the sessions' sockets (docs/dataplane.md "UDP: the
   * native datagram path"). Null on node:dgram.
   */
  private relay: NativeRelay | null = null;
  private readonly byId = new Map<number, UdpSession>();
  private current: ConfigRuntime | null = null;

  /**
   * `source`: where the bound socket comes from in a worker (its slot's socket of the port's
   * reuseport group, held by the primary: workers/udp-group.ts); without it this binds its own.
   */
  /**
   * `native`: serve datagrams through the native relay when it loads (the default); false keeps
   * node:dgram (EngineOptions.udpNative).
   */
  constructor(readonly ip: string, readonly port: number, private readonly clock: Clock, private readonly log: Logger, private readonly limits: ConnLimits, private readonly source?: (ip: string, port: number) => Promise<object>, private readonly native = true) {
    this.socket = createSocket({ type: ip.includes(':') ? 'udp6' : 'udp4', lookup: literal });
    this.io = new FastUdp(this.socket, (msg, from) => this.onDatagram(msg, from));
    this.socket.on('error', (e) => this.log.error({ err: e, ip, port }, 'udp listener error'));
  }

  get key(): string {
    return `udp/${this.ip}:${this.port}`;
  }

  /** Open sessions (tests and metrics). */
  get size(): number {
    return this.count;
  }

  async listen(): Promise<void> {
    const handle = this.source === undefined ? undefined : await this.source(this.ip, this.port);
    await new Promise<void>((resolve, reject) => {
      const onErr = (e: Error) => reject(e);
      this.socket.once('error', onErr);
      const bound = () => {
        this.socket.removeListener('error', onErr);
        for (const set of [(n: number) => this.socket.setRecvBufferSize(n), (n: number) => this.socket.setSendBufferSize(n)]) {
          try {
            set(SOCKET_BUFFER);
          } catch {
            // The kernel's own maximum applies; the default still works.
          }
        }
        resolve();
      };
      // dgram takes a native handle in place of a port (what child_process does with a received one).
      if (handle !== undefined) (this.socket.bind as unknown as (h: object, cb: () => void) => void)(handle, bound);
      else this.socket.bind({ address: this.ip, port: this.port, exclusive: !cluster.isWorker }, bound);
    });
    if (this.native) this.startNative();
  }

  /**
   * Hands the bound socket to the native relay: node:dgram stops reading it, and the relay reads
   * a duplicate of it. The dgram socket stays open (it owns the original descriptor, and a
   * worker's came from the primary) until destroy().
   */
  private startNative(): void {
    this.relay = NativeRelay.start(this.socket, this.log, {
      datagram: (msg, from) => this.onDatagram(msg, from),
      reply: (id, msg, from) => {
        const s = this.byId.get(id);
        if (s !== undefined) this.onReply(s, msg, from);
      },
      error: (id, errno) => this.onNativeError(id, errno),
    });
  }

  private onNativeError(id: number, errno: number): void {
    const s = this.byId.get(id);
    if (s === undefined) {
      this.log.error({ errno, ip: this.ip, port: this.port }, 'udp listener error');
      return;
    }
    this.log.debug({ errno, flow: s.flow }, 'udp session socket error');
    this.end(s);
  }

  /** A reply to a client, from the listening socket. */
  private reply(msg: Buffer, port: number, ip: string): void {
    if (this.relay !== null) this.relay.reply(msg, ip, port);
    else this.io.sendTo(msg, port, ip);
  }

  /**
   * Lets the native relay carry the session's datagrams both ways without asking JavaScript,
   * when nothing is left to decide per datagram: the client has proven its address (two
   * datagrams, so replies are no longer bounded), the socket is connected to the one node it
   * uses, that node is pinned (stickiness) and may serve, its health has been seen (a reply no
   * longer marks it UP), and the session is under the listener's current config. Until the
   * policy epoch moves (native/policy-epoch.ts).
   */
  private establish(s: UdpSession): void {
    if (this.relay === null || s.id < 0 || s.ended || !s.connected || s.fromClient < 2) return;
    if (s.node !== s.sentTo || s.rt !== this.current || s.rt.spec.stickiness === 'none' || !s.node.servesPinned || s.node.status === 'unknown') return;
    this.relay.establish(s.id);
  }

  private onDatagram(msg: Buffer, from: Peer): void {
    const rt = this.rt;
    if (rt === null || this.closed) return;
    let s = this.sessions.get(from.address)?.get(from.port);
    // A session started under another config (the listener now serves a new one) starts over.
    if (s !== undefined && s.rt !== rt) {
      this.end(s);
      s = undefined;
    }
    const fresh = s === undefined;
    if (s === undefined) {
      s = this.open(rt, from);
      if (s === undefined) return;
    }
    s.lastSeen = this.clock.now();
    if (s.fromClient < 2) s.fromClient++;
    rt.traffic.received(msg.length);
    // Stickiness none picks per datagram; otherwise the session keeps its node while it can serve
    // (a drained node keeps its sessions), and one that went down moves on this datagram.
    if (!fresh && (rt.spec.stickiness === 'none' || !s.node.servesPinned)) {
      const next = this.pick(rt, s.ip, s.flow);
      if (next === undefined) return;
      if (next !== s.node) {
        rt.closed(s.node);
        rt.opened(next);
        s.node = next;
      }
    }
    const node = s.node;
    if (s.connected) {
      if (node === s.sentTo) {
        s.io.send(msg);
        if (s.id >= 0) this.establish(s);
        return;
      }
      s.connected = false;
      s.io.disconnect();
    }
    if (node !== s.sentTo) {
      s.sentTo = node;
      s.peers.add(`${node.spec.host}:${node.spec.port}`);
    }
    s.io.sendTo(msg, node.spec.port, node.spec.host);
  }

  /** A datagram on a session's socket: passed on to the client when it is from the session's node. */
  private onReply(s: UdpSession, reply: Buffer, peer: Peer): void {
    if (s.ended) return;
    const last = s.sentTo;
    // A connected socket hears only its node: the kernel drops datagrams from anyone else.
    const known = s.connected || (last !== null && peer.port === last.spec.port && peer.address === last.spec.host);
    if (!known && !s.peers.has(`${peer.address}:${peer.port}`)) return;
    if (known && last !== null) s.rt.seen(last);
    if (s.fromClient < 2) {
      // Maybe a spoofed source: the first datagram's replies are bounded; the rest are dropped.
      if (s.unconfirmedReplies >= UNCONFIRMED_REPLY_DATAGRAMS || s.unconfirmedBytes + reply.length > UNCONFIRMED_REPLY_BYTES) return;
      s.unconfirmedReplies++;
      s.unconfirmedBytes += reply.length;
    }
    s.lastSeen = this.clock.now();
    s.rt.traffic.sent(reply.length);
    this.reply(reply, s.port, s.ip);
    if (s.id >= 0) this.establish(s);
  }

  private pick(rt: ConfigRuntime, ip: string, flow: string): NodeState | undefined {
    const algorithm = rt.spec.algorithm;
    const hash = algorithm === 'ring_hash' ? hashString(flow) : algorithm === 'source' ? hashString(ip) : 0;
    return rt.choose(ip, hash, undefined, null);
  }

  /** A new session, or undefined when a cap, the throttle or the lack of a node refuses it. */
  private open(rt: ConfigRuntime, from: Peer): UdpSession | undefined {
    const cap = rt.throttle.concurrent.total;
    // The config's own bound, beside the NodeBalancer's: one config can never hold more.
    if (cap > 0 && this.count >= cap) return void this.limits.refuse('udp_config_cap');
    const flow = `${from.address}:${from.port}`;
    // Every per-client limit counts the client key (an IPv6 client by its /64); stickiness and
    // replies use the address and port the datagram came from.
    const key = this.limits.key(from.address);
    if (!this.limits.admitUdp(rt.throttle, key)) return undefined;
    const node = this.pick(rt, from.address, flow);
    if (node === undefined) {
      this.limits.releaseUdp(rt.throttle, key);
      return undefined;
    }
    // Stickiness none moves on every datagram, and a disconnect gives the socket a new local port
    // (late replies to the old one are lost), so those sessions never connect (docs/dataplane.md "UDP").
    const connected = rt.spec.stickiness !== 'none';
    let id = -1;
    let io: SessionIo;
    if (this.relay !== null) {
      id = this.relay.open(from, node.spec.host, node.spec.port, connected);
      if (id < 0) {
        // No socket for it (descriptors, memory): the datagram is dropped, as a full table would.
        this.log.debug({ errno: -id, flow }, 'udp session socket could not be opened');
        this.limits.releaseUdp(rt.throttle, key);
        return undefined;
      }
      io = this.relay.io(id, (rx, tx) => {
        this.byId.delete(id);
        this.tally(s, rx, tx);
      });
    } else {
      io = dgramSessionIo(node.spec.host, node.spec.port, connected, (reply, peer) => this.onReply(s, reply, peer), (e) => {
        this.log.debug({ err: e, flow }, 'udp session socket error');
        this.end(s);
      });
    }
    const s: UdpSession = {
      flow, ip: from.address, port: from.port, key, fromClient: 0, unconfirmedReplies: 0, unconfirmedBytes: 0, rt, io, id, node, sentTo: node, peers: new Set([`${node.spec.host}:${node.spec.port}`]),
      connected, lastSeen: this.clock.now(), ended: false,
    };
    if (id >= 0) this.byId.set(id, s);
    let byPort = this.sessions.get(s.ip);
    if (byPort === undefined) this.sessions.set(s.ip, (byPort = new Map()));
    byPort.set(s.port, s);
    this.count++;
    rt.opened(node);
    rt.traffic.connectionOpened();
    this.startSweeper(rt);
    return s;
  }

  /** Bytes the native relay carried for a session, into its config's counters. */
  private tally(s: UdpSession, rx: number, tx: number): void {
    if (rx > 0) s.rt.traffic.received(rx);
    if (tx > 0) s.rt.traffic.sent(tx);
  }

  /**
   * Takes what the native relay carried since the last call: counters, and the last-seen time of
   * each session that had traffic (set to now: a natively relayed session's silence is measured
   * from the sweep that last saw it active, so it may outlive its timeout by up to one sweep).
   * The sweep calls it, and so does every reading of the counters (ListenerSet.collectUdp).
   */
  collect(): void {
    if (this.relay === null) return;
    const got = this.relay.collect();
    const now = this.clock.now();
    for (let i = 0; i + 2 < got.length; i += 3) {
      const s = this.byId.get(got[i]!);
      if (s === undefined) continue;
      s.lastSeen = now;
      this.tally(s, got[i + 1]!, got[i + 2]!);
    }
  }

  private end(s: UdpSession): void {
    if (s.ended) return;
    s.ended = true;
    const byPort = this.sessions.get(s.ip);
    if (byPort !== undefined && byPort.get(s.port) === s) {
      byPort.delete(s.port);
      this.count--;
      if (byPort.size === 0) this.sessions.delete(s.ip);
    }
    s.io.close();
    s.rt.closed(s.node);
    s.rt.traffic.connectionClosed();
    this.limits.releaseUdp(s.rt.throttle, s.key);
  }

  private startSweeper(rt: ConfigRuntime): void {
    if (this.sweeper !== null) return;
    const every = Math.max(100, Math.min(SWEEP_MS, Math.floor(rt.spec.udpSessionTimeoutMs / 4)));
    this.sweeper = this.clock.setInterval(() => this.sweep(), every);
  }

  /** Ends the sessions silent for their config's timeout; stops when none are left. */
  private sweep(): void {
    this.collect();
    const now = this.clock.now();
    for (const byPort of this.sessions.values()) {
      for (const s of byPort.values()) {
        if (now - s.lastSeen >= s.rt.spec.udpSessionTimeoutMs) this.end(s);
      }
    }
    if (this.count === 0 && this.sweeper !== null) {
      this.sweeper.cancel();
      this.sweeper = null;
    }
  }

  /**
   * UDP has no connection to let finish: a removed listener ends its sessions and closes at once,
   * so the address can be bound again by the next snapshot.
   */
  drain(_deadlineMs: number): Promise<void> {
    this.destroy();
    return Promise.resolve();
  }

  destroy(): void {
    if (this.closed) return;
    this.closed = true;
    for (const s of [...this.sessions.values()].flatMap((byPort) => [...byPort.values()])) this.end(s);
    this.sweeper?.cancel();
    this.sweeper = null;
    this.relay?.destroy();
    this.relay = null;
    try {
      this.socket.close();
    } catch {
      // Never bound (a failed listen): nothing to close.
    }
  }
}
