/*
 * The udp listeners' native datagram path (docs/dataplane.md "UDP: the native datagram path").
 *
 * Why it exists: node:dgram does native work per datagram that no JavaScript can reach (a
 * RemoteInfo object with its address formatted by snprintf, a Buffer, a 64 KiB malloc per read,
 * a callback into V8, a SendWrap per send, and a read ending in EAGAIN per wake-up); that work,
 * not our JavaScript (about 2%), kept the udp relay at 1.6-2x nginx's CPU per datagram
 * (docs/performance.md "The udp gap: at node:dgram's floor").
 *
 * What it does: per udp listener, a relay owns a duplicate of the listening socket and one
 * socket per client flow (session), reads each in batches with recvmmsg from a libuv poll handle
 * on the data plane's own loop, and relays the datagrams of an *established* flow itself: client
 * to node with send() on the session's connected socket, node to client with one sendmmsg per
 * batch on the listening socket. JavaScript marks a session established (set_fast) only when its
 * policy has nothing left to decide per datagram; everything else (a new flow, a session that is
 * not established, an error on a session socket) is handed to JavaScript, which still owns the
 * balancing, stickiness, caps, throttles, health and expiry (dataplane/listeners/udp-listener.ts).
 * An established session stops being one the moment anything the policy reads changes: every
 * such change bumps a shared epoch (an Int32 in a buffer JavaScript owns), and a session whose
 * epoch is old goes back through JavaScript. The relay keeps a reference to that Int32Array, never
 * a pointer into it: JavaScript can detach or shrink its buffer (transfer(), resize()), so the value
 * is read through the reference at each wake-up and again after each call into JavaScript, the only
 * places it can have changed; a buffer that no longer holds it establishes nothing.
 *
 * Memory safety: all datagrams land in fixed buffers of UDP's largest size; a datagram the
 * kernel marks truncated is dropped; the batch is BATCH entries; no length from the network
 * sizes a copy (a datagram's own length, bounded by its buffer, is the only one used); addresses
 * from JavaScript are copied into fixed arrays with their length checked; numbers from JavaScript
 * are read as doubles and refused unless they are integers in range (never wrapped or rounded);
 * the flow table holds at most MAX_SESSIONS (JavaScript's caps are far below it).
 *
 * Single-threaded: everything runs on the loop thread of the Node environment that made it.
 */
#define NAPI_VERSION 8
#define _GNU_SOURCE
#include <node_api.h>
#include <uv.h>
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <math.h>
#include <net/if.h>
#include <netinet/in.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

/* Datagrams read per recvmmsg, and at most rounds of it per wake-up (other handles get a turn). */
#define BATCH 32
#define ROUNDS 8
/* The largest UDP payload over IPv4 or IPv6 (without jumbograms) fits in this. */
#define DGRAM_MAX 65536
/* A hard ceiling on one relay's flows; the per-config and per-client caps in JavaScript come first. */
#define MAX_SESSIONS (1u << 22)
#define ADDR_TEXT 64

/* The batch buffers: one set per process, since every relay runs on one thread and none nests. */
static unsigned char bufs[BATCH][DGRAM_MAX];
static struct mmsghdr msgs[BATCH];
static struct iovec iovs[BATCH];
static struct sockaddr_storage froms[BATCH];
static struct mmsghdr outs[BATCH];
static struct iovec out_iovs[BATCH];
/* Datagrams relayed without JavaScript, by every relay of the process (tests, benches). */
static double relayed_total;
/* Datagrams every relay of the process dropped: a send the kernel refused (EAGAIN: a full send
 * buffer, or another error), and truncated reads (the data plane's metrics). */
static double dropped_total, truncated_total;
/* The epoch value when the policy epoch's buffer no longer holds one: no session is established. */
#define NO_EPOCH INT32_MIN

typedef struct relay relay;

typedef struct session {
  relay *r;
  uint32_t id;
  int fd;
  uv_poll_t poll;
  struct sockaddr_storage client;
  socklen_t client_len;
  uint64_t hash;
  struct session *next; /* hash chain */
  int32_t fast_epoch;   /* the epoch it was marked established in; -1: not established */
  int connected;
  int touched;          /* a datagram either way since the last collect() */
  double rx, tx;        /* bytes relayed here since the last collect() */
  int closed;
} session;

struct relay {
  napi_env env;
  int fd;
  uv_poll_t poll;
  int polling;
  napi_ref on_datagram, on_reply, on_error, epoch_ref;
  napi_async_context ctx;
  int32_t epoch;        /* the policy epoch as last read through epoch_ref (load_epoch) */
  uint32_t calls;       /* calls into JavaScript on the stack (destroy defers the async context's end) */
  uint64_t seed;
  session **buckets;
  uint32_t nbuckets, count;
  session **by_id;      /* index id -> session, ids reused from `free_ids` */
  uint32_t id_cap, next_id;
  uint32_t *free_ids;
  uint32_t nfree;
  uint32_t pending;     /* libuv handles not yet closed (the relay is freed after them) */
  int destroyed, finalized;
  double dropped, truncated;
  session **touched;    /* sessions with touched set, for collect() */
  uint32_t ntouched, touched_cap;
};

/* ---- flow table ---- */

static uint64_t mix(uint64_t x) {
  x ^= x >> 33; x *= 0xff51afd7ed558ccdULL; x ^= x >> 33; x *= 0xc4ceb9fe1a85ec53ULL; x ^= x >> 33;
  return x;
}

/* A keyed hash of the client address and port: the seed is random per relay, so a client choosing
 * its source ports cannot aim them at one chain. */
static uint64_t addr_hash(const relay *r, const struct sockaddr_storage *a) {
  uint64_t h = r->seed;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)a;
    h = mix(h ^ ((uint64_t)s->sin_addr.s_addr << 16 | s->sin_port));
  } else {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a;
    uint64_t w[2];
    memcpy(w, &s->sin6_addr, 16);
    h = mix(h ^ w[0]);
    h = mix(h ^ w[1] ^ s->sin6_port ^ ((uint64_t)s->sin6_scope_id << 16));
  }
  return h;
}

static int addr_eq(const struct sockaddr_storage *a, const struct sockaddr_storage *b) {
  if (a->ss_family != b->ss_family) return 0;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *x = (const struct sockaddr_in *)a, *y = (const struct sockaddr_in *)b;
    return x->sin_port == y->sin_port && x->sin_addr.s_addr == y->sin_addr.s_addr;
  }
  const struct sockaddr_in6 *x = (const struct sockaddr_in6 *)a, *y = (const struct sockaddr_in6 *)b;
  /* The scope (interface) too: link-local clients with one address on two links are two flows. */
  return x->sin6_port == y->sin6_port && x->sin6_scope_id == y->sin6_scope_id && memcmp(&x->sin6_addr, &y->sin6_addr, 16) == 0;
}

static session *lookup(relay *r, const struct sockaddr_storage *a) {
  if (a->ss_family != AF_INET && a->ss_family != AF_INET6) return NULL;
  uint64_t h = addr_hash(r, a);
  for (session *s = r->buckets[h & (r->nbuckets - 1)]; s != NULL; s = s->next) {
    if (s->hash == h && addr_eq(&s->client, a)) return s;
  }
  return NULL;
}

static int grow_buckets(relay *r) {
  uint32_t n = r->nbuckets * 2;
  session **b = calloc(n, sizeof *b);
  if (b == NULL) return -1;
  for (uint32_t i = 0; i < r->nbuckets; i++) {
    session *s = r->buckets[i];
    while (s != NULL) {
      session *next = s->next;
      s->next = b[s->hash & (n - 1)];
      b[s->hash & (n - 1)] = s;
      s = next;
    }
  }
  free(r->buckets);
  r->buckets = b;
  r->nbuckets = n;
  return 0;
}

static void unlink_session(relay *r, session *s) {
  session **p = &r->buckets[s->hash & (r->nbuckets - 1)];
  while (*p != NULL && *p != s) p = &(*p)->next;
  if (*p == s) *p = s->next;
  r->by_id[s->id] = NULL;
  r->free_ids[r->nfree++] = s->id;
  r->count--;
}

/* ---- lifetime ---- */

static void free_relay(relay *r) {
  free(r->buckets);
  free(r->by_id);
  free(r->free_ids);
  free(r->touched);
  free(r);
}

static void maybe_free(relay *r) {
  if (r->destroyed && r->finalized && r->pending == 0) free_relay(r);
}

static void on_session_closed(uv_handle_t *h) {
  session *s = h->data;
  relay *r = s->r;
  free(s);
  r->pending--;
  maybe_free(r);
}

static void on_listener_closed(uv_handle_t *h) {
  relay *r = h->data;
  r->pending--;
  maybe_free(r);
}

static void close_session(relay *r, session *s) {
  if (s->closed) return;
  s->closed = 1;
  unlink_session(r, s);
  uv_poll_stop(&s->poll);
  close(s->fd);
  s->fd = -1;
  uv_close((uv_handle_t *)&s->poll, on_session_closed);
}

/* ---- the policy epoch ---- */

/*
 * Reads the policy epoch through the relay's reference to its Int32Array (in a handle scope the
 * caller opened). The buffer is JavaScript's: it may have been detached (transfer()) or shrunk
 * (a resizable buffer's resize()) since the last read, so no pointer into it is kept; an array
 * with no element left reads as NO_EPOCH, which no session matches.
 */
static void load_epoch(relay *r) {
  napi_value v;
  napi_typedarray_type type;
  size_t length = 0;
  void *data = NULL;
  r->epoch = NO_EPOCH;
  if (r->destroyed) return;
  if (napi_get_reference_value(r->env, r->epoch_ref, &v) != napi_ok || v == NULL) return;
  if (napi_get_typedarray_info(r->env, v, &type, &length, &data, NULL, NULL) != napi_ok || type != napi_int32_array || length < 1 || data == NULL) return;
  memcpy(&r->epoch, data, sizeof r->epoch);
}

/* At a wake-up: JavaScript has run since the last one (other handles, timers). */
static void refresh_epoch(relay *r) {
  napi_handle_scope scope;
  r->epoch = NO_EPOCH;
  if (napi_open_handle_scope(r->env, &scope) != napi_ok) return;
  load_epoch(r);
  napi_close_handle_scope(r->env, scope);
}

/* ---- calls into JavaScript ---- */

/* The relay's async context ends when the relay is destroyed and no call into JavaScript is on the stack. */
static void end_async_context(relay *r) {
  if (r->ctx == NULL || r->calls > 0) return;
  napi_async_destroy(r->env, r->ctx);
  r->ctx = NULL;
}

static void call_js(relay *r, napi_ref fn_ref, size_t argc, napi_value *argv) {
  napi_env env = r->env;
  napi_value fn, recv, result;
  if (r->destroyed) return;
  if (napi_get_reference_value(env, fn_ref, &fn) != napi_ok || fn == NULL) return;
  /* napi_make_callback wants an object as `this`; the callbacks are arrow functions and ignore it. */
  napi_get_global(env, &recv);
  /* The callback may destroy the relay: its async context must outlive this napi_make_callback,
   * so destroy_relay leaves it to the end of the outermost call (r itself lives until libuv's
   * close callbacks, which never run inside this one). */
  r->calls++;
  napi_status st = napi_make_callback(env, r->ctx, recv, fn, argc, argv, &result);
  r->calls--;
  if (r->destroyed) end_async_context(r);
  if (st == napi_pending_exception) {
    napi_value err;
    napi_get_and_clear_last_exception(env, &err);
    napi_fatal_exception(env, err);
  }
  /* JavaScript ran: it may have bumped the epoch, or detached or shrunk its buffer. */
  load_epoch(r);
}

static napi_value addr_text(napi_env env, const struct sockaddr_storage *a, uint32_t *port) {
  char text[ADDR_TEXT];
  napi_value v;
  text[0] = 0;
  if (a->ss_family == AF_INET) {
    const struct sockaddr_in *s = (const struct sockaddr_in *)a;
    inet_ntop(AF_INET, &s->sin_addr, text, sizeof text);
    *port = ntohs(s->sin_port);
  } else if (a->ss_family == AF_INET6) {
    const struct sockaddr_in6 *s = (const struct sockaddr_in6 *)a;
    inet_ntop(AF_INET6, &s->sin6_addr, text, sizeof text);
    /* A link-local source carries its interface, as node:dgram writes it ("fe80::1%eth0"): the
     * listener keys flows by this text, and get_addr reads the zone back into sin6_scope_id.
     * INET6_ADDRSTRLEN + '%' + IF_NAMESIZE fits ADDR_TEXT. */
    if (IN6_IS_ADDR_LINKLOCAL(&s->sin6_addr) && s->sin6_scope_id != 0) {
      size_t n = strlen(text);
      char name[IF_NAMESIZE];
      if (if_indextoname(s->sin6_scope_id, name) != NULL) snprintf(text + n, sizeof text - n, "%%%s", name);
      else snprintf(text + n, sizeof text - n, "%%%u", (unsigned)s->sin6_scope_id);
    }
    *port = ntohs(s->sin6_port);
  } else {
    *port = 0;
  }
  napi_create_string_utf8(env, text, NAPI_AUTO_LENGTH, &v);
  return v;
}

/* onDatagram(buffer, address, port) or onReply(id, buffer, address, port): a copy of the bytes. */
static void hand_to_js(relay *r, napi_ref fn, session *s, const unsigned char *data, size_t len, const struct sockaddr_storage *from) {
  napi_env env = r->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value argv[4], buf;
  void *copy;
  uint32_t port;
  size_t argc = 0;
  if (napi_create_buffer_copy(env, len, data, &copy, &buf) == napi_ok) {
    if (s != NULL) napi_create_uint32(env, s->id, &argv[argc++]);
    argv[argc++] = buf;
    argv[argc++] = addr_text(env, from, &port);
    napi_create_uint32(env, port, &argv[argc++]);
    call_js(r, fn, argc, argv);
  }
  napi_close_handle_scope(env, scope);
}

static void error_to_js(relay *r, session *s, int err) {
  napi_env env = r->env;
  napi_handle_scope scope;
  if (napi_open_handle_scope(env, &scope) != napi_ok) return;
  napi_value argv[2];
  napi_create_uint32(env, s == NULL ? 0xffffffffu : s->id, &argv[0]);
  napi_create_int32(env, err, &argv[1]);
  call_js(r, r->on_error, 2, argv);
  napi_close_handle_scope(env, scope);
}

static void touch(relay *r, session *s) {
  if (s->touched) return;
  if (r->ntouched == r->touched_cap) {
    uint32_t cap = r->touched_cap == 0 ? 256 : r->touched_cap * 2;
    session **t = realloc(r->touched, cap * sizeof *t);
    if (t == NULL) return; /* counted at the next datagram instead */
    r->touched = t;
    r->touched_cap = cap;
  }
  s->touched = 1;
  r->touched[r->ntouched++] = s;
}

static int established(const relay *r, const session *s) {
  return !s->closed && s->fast_epoch >= 0 && s->fast_epoch == r->epoch;
}

static int recv_batch(int fd) {
  for (int i = 0; i < BATCH; i++) {
    iovs[i].iov_base = bufs[i];
    iovs[i].iov_len = DGRAM_MAX;
    memset(&msgs[i].msg_hdr, 0, sizeof msgs[i].msg_hdr);
    msgs[i].msg_hdr.msg_name = &froms[i];
    msgs[i].msg_hdr.msg_namelen = sizeof froms[i];
    msgs[i].msg_hdr.msg_iov = &iovs[i];
    msgs[i].msg_hdr.msg_iovlen = 1;
    msgs[i].msg_len = 0;
  }
  return recvmmsg(fd, msgs, BATCH, MSG_DONTWAIT, NULL);
}

/* A datagram that arrived whole: not truncated, and its length within its buffer. */
static int whole(relay *r, int i) {
  if ((msgs[i].msg_hdr.msg_flags & MSG_TRUNC) != 0 || msgs[i].msg_len > DGRAM_MAX) {
    r->truncated++;
    truncated_total++;
    return 0;
  }
  return 1;
}

/*
 * libuv stops a poll handle whose descriptor reports an error (EPOLLERR) and calls back with
 * UV_EBADF. On a UDP socket that error is only a pending socket error, such as the ICMP "port
 * unreachable" a connected session socket hears from a node not listening for a moment: it is
 * taken (SO_ERROR clears it) and the poll started again, so the socket is read again.
 */
static int recover(uv_poll_t *h, int fd, uv_poll_cb cb) {
  int err = 0;
  socklen_t len = sizeof err;
  getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &len);
  return uv_poll_start(h, UV_READABLE, cb);
}

/* ---- the listening socket: client to node ---- */

static void on_listener(uv_poll_t *h, int status, int events) {
  (void)events;
  relay *r = h->data;
  if (r->destroyed) return;
  if (status < 0 && recover(h, r->fd, on_listener) != 0) return;
  refresh_epoch(r);
  for (int round = 0; round < ROUNDS && !r->destroyed; round++) {
    int n = recv_batch(r->fd);
    if (n < 0) {
      if (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR && errno != ECONNREFUSED) error_to_js(r, NULL, errno);
      return;
    }
    for (int i = 0; i < n && !r->destroyed; i++) {
      if (!whole(r, i)) continue;
      size_t len = msgs[i].msg_len;
      session *s = lookup(r, &froms[i]);
      if (s != NULL && established(r, s)) {
        s->rx += (double)len;
        relayed_total++;
        touch(r, s);
        if (send(s->fd, bufs[i], len, MSG_DONTWAIT) < 0 && errno != ECONNREFUSED) {
          r->dropped++;
          dropped_total++;
        }
        continue;
      }
      hand_to_js(r, r->on_datagram, NULL, bufs[i], len, &froms[i]);
    }
    if (n < BATCH) return;
  }
}

/* Sends outs[0..k) on the listening socket; a datagram the kernel refuses is dropped, as UDP may. */
static void flush_replies(relay *r, int k) {
  int done = 0;
  while (done < k) {
    int m = sendmmsg(r->fd, outs + done, (unsigned)(k - done), MSG_DONTWAIT);
    if (m <= 0) {
      if (m < 0 && errno == EINTR) continue;
      r->dropped++;
      dropped_total++;
      done++;
      continue;
    }
    done += m;
  }
}

/* ---- a session socket: node to client ---- */

static void on_session(uv_poll_t *h, int status, int events) {
  (void)events;
  session *s = h->data;
  relay *r = s->r;
  if (s->closed || r->destroyed) return;
  if (status < 0 && recover(h, s->fd, on_session) != 0) {
    error_to_js(r, s, EBADF); /* a socket that cannot be polled again: JavaScript ends the session */
    return;
  }
  refresh_epoch(r);
  /* JavaScript may close the session (or destroy the relay) while handling a reply: checked before every read. */
  for (int round = 0; round < ROUNDS && !s->closed && !r->destroyed; round++) {
    int n = recv_batch(s->fd);
    if (n < 0) {
      int e = errno;
      if (e == EAGAIN || e == EWOULDBLOCK || e == EINTR) return;
      /* A connected socket hears the ICMP "port unreachable" of a node not listening: the datagram
       * is lost and the session stays (health checks decide that a node is down). */
      if (e == ECONNREFUSED) continue;
      error_to_js(r, s, e);
      return;
    }
    int k = 0;
    for (int i = 0; i < n; i++) {
      if (s->closed || r->destroyed) return;
      if (!whole(r, i)) continue;
      size_t len = msgs[i].msg_len;
      if (established(r, s)) {
        s->tx += (double)len;
        relayed_total++;
        touch(r, s);
        out_iovs[k].iov_base = bufs[i];
        out_iovs[k].iov_len = len;
        memset(&outs[k].msg_hdr, 0, sizeof outs[k].msg_hdr);
        outs[k].msg_hdr.msg_name = &s->client;
        outs[k].msg_hdr.msg_namelen = s->client_len;
        outs[k].msg_hdr.msg_iov = &out_iovs[k];
        outs[k].msg_hdr.msg_iovlen = 1;
        k++;
        continue;
      }
      /* In order: what was batched goes out before JavaScript sees the next reply. */
      if (k > 0) flush_replies(r, k);
      k = 0;
      hand_to_js(r, r->on_reply, s, bufs[i], len, &froms[i]);
    }
    if (k > 0 && !r->destroyed) flush_replies(r, k);
    if (n < BATCH) return;
  }
}

/* ---- arguments ---- */

static relay *get_relay(napi_env env, napi_value v) {
  relay *r = NULL;
  if (napi_get_value_external(env, v, (void **)&r) != napi_ok || r == NULL || r->destroyed) {
    napi_throw_error(env, "ERR_UDP_RELAY", "not a live udp relay");
    return NULL;
  }
  return r;
}

/*
 * An integer in [min, max], or a thrown TypeError (not a number) or RangeError (a fraction, NaN,
 * an infinity or out of range). Read as a double: napi_get_value_uint32 and _int32 would wrap
 * 2^32+5 to 5 and cut 1.5 to 1, naming another session or port than the one asked.
 */
static int get_int(napi_env env, napi_value v, double min, double max, const char *what, int64_t *out) {
  double d;
  if (napi_get_value_double(env, v, &d) != napi_ok) {
    napi_throw_type_error(env, "ERR_UDP_RELAY", what);
    return -1;
  }
  if (!isfinite(d) || d != floor(d) || d < min || d > max) {
    napi_throw_range_error(env, "ERR_UDP_RELAY", what);
    return -1;
  }
  *out = (int64_t)d;
  return 0;
}

static int get_u32(napi_env env, napi_value v, const char *what, uint32_t *out) {
  int64_t x;
  if (get_int(env, v, 0, UINT32_MAX, what, &x) != 0) return -1;
  *out = (uint32_t)x;
  return 0;
}

/*
 * An IP literal and port into a sockaddr; the text is bounded by a fixed array, its length checked.
 * An IPv6 literal may end in a zone, "%" and an interface name or number, as addr_text writes a
 * link-local source: it becomes sin6_scope_id.
 */
static int get_addr(napi_env env, napi_value ip, napi_value port, struct sockaddr_storage *a, socklen_t *len) {
  char text[ADDR_TEXT];
  size_t n = 0;
  uint32_t p;
  /* n >= sizeof text - 1: longer than any IP literal (and maybe cut); strlen != n: a NUL inside. */
  if (napi_get_value_string_utf8(env, ip, text, sizeof text, &n) != napi_ok || n >= sizeof text - 1 || strlen(text) != n) {
    napi_throw_type_error(env, "ERR_UDP_RELAY", "bad address");
    return -1;
  }
  if (get_u32(env, port, "port must be an integer from 0 to 65535", &p) != 0) return -1;
  if (p > 65535) {
    napi_throw_range_error(env, "ERR_UDP_RELAY", "port must be an integer from 0 to 65535");
    return -1;
  }
  uint32_t scope = 0;
  char *zone = strchr(text, '%');
  if (zone != NULL) {
    *zone++ = 0;
    char *end = NULL;
    unsigned long z = *zone >= '0' && *zone <= '9' ? strtoul(zone, &end, 10) : 0;
    if (end != NULL && *end == 0 && z > 0 && z <= UINT32_MAX) scope = (uint32_t)z;
    else if (end == NULL && *zone != 0) scope = if_nametoindex(zone);
    if (scope == 0) {
      napi_throw_type_error(env, "ERR_UDP_RELAY", "not an IP literal");
      return -1;
    }
  }
  memset(a, 0, sizeof *a);
  struct sockaddr_in *a4 = (struct sockaddr_in *)a;
  struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)a;
  if (zone == NULL && inet_pton(AF_INET, text, &a4->sin_addr) == 1) {
    a4->sin_family = AF_INET;
    a4->sin_port = htons((uint16_t)p);
    *len = sizeof *a4;
    return 0;
  }
  if (inet_pton(AF_INET6, text, &a6->sin6_addr) == 1) {
    a6->sin6_family = AF_INET6;
    a6->sin6_port = htons((uint16_t)p);
    a6->sin6_scope_id = scope;
    *len = sizeof *a6;
    return 0;
  }
  napi_throw_type_error(env, "ERR_UDP_RELAY", "not an IP literal");
  return -1;
}

/* A session by id; NULL either with an exception pending (not an id) or without (no such session). */
static session *get_session(napi_env env, relay *r, napi_value v) {
  uint32_t id;
  if (get_u32(env, v, "a session id must be an integer from 0 to 2^32-1", &id) != 0) return NULL;
  if (id >= r->next_id || r->by_id[id] == NULL) return NULL;
  return r->by_id[id];
}

static int throwing(napi_env env) {
  bool pending = false;
  return napi_is_exception_pending(env, &pending) != napi_ok || pending;
}

static napi_value num(napi_env env, double d) {
  napi_value v;
  napi_create_double(env, d, &v);
  return v;
}

#define ARGS(n)                                                    \
  size_t argc = n;                                                 \
  napi_value argv[n];                                              \
  if (napi_get_cb_info(env, info, &argc, argv, NULL, NULL) != napi_ok || argc < n) { \
    napi_throw_type_error(env, "ERR_UDP_RELAY", "missing arguments"); \
    return NULL;                                                   \
  }

static void finalize_relay(napi_env env, void *data, void *hint);

static void destroy_relay(relay *r) {
  if (r->destroyed) return;
  r->destroyed = 1;
  for (uint32_t i = 0; i < r->next_id; i++) {
    if (r->by_id[i] != NULL) close_session(r, r->by_id[i]);
  }
  if (r->polling) {
    uv_poll_stop(&r->poll);
    close(r->fd);
    uv_close((uv_handle_t *)&r->poll, on_listener_closed);
  } else {
    close(r->fd);
  }
  r->polling = 0;
  napi_env env = r->env;
  napi_delete_reference(env, r->on_datagram);
  napi_delete_reference(env, r->on_reply);
  napi_delete_reference(env, r->on_error);
  napi_delete_reference(env, r->epoch_ref);
  /* Not from inside a callback's napi_make_callback, which is still using it: call_js ends it then. */
  end_async_context(r);
}

/* create(fd, epoch: Int32Array, onDatagram, onReply, onError) -> relay */
static napi_value js_create(napi_env env, napi_callback_info info) {
  ARGS(5)
  int64_t fd;
  if (get_int(env, argv[0], 0, INT32_MAX, "fd must be an integer from 0 to 2^31-1", &fd) != 0) return NULL;
  napi_typedarray_type type;
  size_t length;
  void *data;
  if (napi_get_typedarray_info(env, argv[1], &type, &length, &data, NULL, NULL) != napi_ok || type != napi_int32_array || length < 1 || data == NULL) {
    napi_throw_type_error(env, "ERR_UDP_RELAY", "epoch must be an Int32Array");
    return NULL;
  }
  uv_loop_t *loop;
  if (napi_get_uv_event_loop(env, &loop) != napi_ok) return NULL;
  int dup_fd = fcntl((int)fd, F_DUPFD_CLOEXEC, 0);
  if (dup_fd < 0) {
    napi_throw_error(env, "ERR_UDP_RELAY", "dup of the listening socket failed");
    return NULL;
  }
  int fl = fcntl(dup_fd, F_GETFL);
  if (fl >= 0) fcntl(dup_fd, F_SETFL, fl | O_NONBLOCK);
  relay *r = calloc(1, sizeof *r);
  if (r == NULL) {
    close(dup_fd);
    napi_throw_error(env, "ERR_UDP_RELAY", "out of memory");
    return NULL;
  }
  r->env = env;
  r->fd = dup_fd;
  r->nbuckets = 1024;
  r->buckets = calloc(r->nbuckets, sizeof *r->buckets);
  r->id_cap = 256;
  r->by_id = calloc(r->id_cap, sizeof *r->by_id);
  r->free_ids = calloc(r->id_cap, sizeof *r->free_ids);
  if (getrandom(&r->seed, sizeof r->seed, 0) != sizeof r->seed) r->seed = (uint64_t)(uintptr_t)r ^ (uint64_t)uv_hrtime();
  if (r->buckets == NULL || r->by_id == NULL || r->free_ids == NULL) {
    close(dup_fd);
    free_relay(r);
    napi_throw_error(env, "ERR_UDP_RELAY", "out of memory");
    return NULL;
  }
  /* Each step that can fail comes before anything it would have to undo in JavaScript: the poll
   * handle before the async context and the references (a descriptor epoll refuses, such as a
   * regular file, fails here with nothing to release but memory). */
  if (uv_poll_init(loop, &r->poll, dup_fd) != 0) {
    close(dup_fd);
    free_relay(r);
    napi_throw_error(env, "ERR_UDP_RELAY", "poll of the listening socket failed");
    return NULL;
  }
  r->poll.data = r;
  r->pending = 1;
  r->polling = 1;
  napi_value name, ext;
  napi_create_string_utf8(env, "fulcrum:udp-relay", NAPI_AUTO_LENGTH, &name);
  if (napi_async_init(env, NULL, name, &r->ctx) != napi_ok) {
    /* The poll handle is initialised: the relay is freed after libuv has closed it. */
    r->ctx = NULL;
    r->destroyed = r->finalized = 1;
    r->polling = 0;
    close(dup_fd);
    uv_close((uv_handle_t *)&r->poll, on_listener_closed);
    napi_throw_error(env, "ERR_UDP_RELAY", "async context failed");
    return NULL;
  }
  napi_create_reference(env, argv[1], 1, &r->epoch_ref);
  napi_create_reference(env, argv[2], 1, &r->on_datagram);
  napi_create_reference(env, argv[3], 1, &r->on_reply);
  napi_create_reference(env, argv[4], 1, &r->on_error);
  if (napi_create_external(env, r, finalize_relay, NULL, &ext) != napi_ok) {
    destroy_relay(r); /* the references, the async context, the descriptor and the poll handle */
    r->finalized = 1;
    maybe_free(r);
    napi_throw_error(env, "ERR_UDP_RELAY", "out of memory");
    return NULL;
  }
  load_epoch(r);
  uv_poll_start(&r->poll, UV_READABLE, on_listener);
  return ext;
}

static void finalize_relay(napi_env env, void *data, void *hint) {
  (void)env; (void)hint;
  relay *r = data;
  destroy_relay(r);
  r->finalized = 1;
  maybe_free(r);
}

/* open(relay, clientIp, clientPort, nodeIp, nodePort, connect) -> id, or -errno */
static napi_value js_open(napi_env env, napi_callback_info info) {
  ARGS(6)
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  struct sockaddr_storage client, node;
  socklen_t client_len, node_len;
  bool connect_it;
  if (get_addr(env, argv[1], argv[2], &client, &client_len) != 0 || get_addr(env, argv[3], argv[4], &node, &node_len) != 0) return NULL;
  if (napi_get_value_bool(env, argv[5], &connect_it) != napi_ok) return NULL;
  if (lookup(r, &client) != NULL) return num(env, -EEXIST);
  if (r->count >= MAX_SESSIONS) return num(env, -ENOSPC);
  if (r->count >= r->nbuckets && grow_buckets(r) != 0) return num(env, -ENOMEM);
  uint32_t id;
  if (r->nfree > 0) {
    id = r->free_ids[--r->nfree];
  } else {
    if (r->next_id == r->id_cap) {
      uint32_t cap = r->id_cap * 2;
      session **b = realloc(r->by_id, cap * sizeof *b);
      if (b == NULL) return num(env, -ENOMEM);
      r->by_id = b;
      uint32_t *f = realloc(r->free_ids, cap * sizeof *f);
      if (f == NULL) return num(env, -ENOMEM);
      r->free_ids = f;
      memset(r->by_id + r->id_cap, 0, (cap - r->id_cap) * sizeof *b);
      r->id_cap = cap;
    }
    id = r->next_id++;
  }
  int fd = socket(node.ss_family, SOCK_DGRAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) {
    int e = errno;
    r->free_ids[r->nfree++] = id;
    return num(env, -e);
  }
  int rc;
  if (connect_it) {
    rc = connect(fd, (struct sockaddr *)&node, node_len);
  } else {
    struct sockaddr_storage any;
    memset(&any, 0, sizeof any);
    any.ss_family = node.ss_family;
    rc = bind(fd, (struct sockaddr *)&any, node.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6));
  }
  session *s = rc == 0 ? calloc(1, sizeof *s) : NULL;
  uv_loop_t *loop;
  if (s == NULL || napi_get_uv_event_loop(env, &loop) != napi_ok || uv_poll_init(loop, &s->poll, fd) != 0) {
    int e = rc != 0 ? errno : ENOMEM;
    free(s);
    close(fd);
    r->free_ids[r->nfree++] = id;
    return num(env, -e);
  }
  s->r = r;
  s->id = id;
  s->fd = fd;
  s->client = client;
  s->client_len = client_len;
  s->hash = addr_hash(r, &client);
  s->fast_epoch = -1;
  s->connected = connect_it;
  s->poll.data = s;
  s->next = r->buckets[s->hash & (r->nbuckets - 1)];
  r->buckets[s->hash & (r->nbuckets - 1)] = s;
  r->by_id[id] = s;
  r->count++;
  r->pending++;
  uv_poll_start(&s->poll, UV_READABLE, on_session);
  return num(env, id);
}

/* send(relay, id, buffer[, ip, port]) -> 0 or -errno: a session's datagram to its node. */
static napi_value js_send(napi_env env, napi_callback_info info) {
  size_t argc = 5;
  napi_value argv[5];
  napi_get_cb_info(env, info, &argc, argv, NULL, NULL);
  if (argc < 3) {
    napi_throw_type_error(env, "ERR_UDP_RELAY", "missing arguments");
    return NULL;
  }
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  session *s = get_session(env, r, argv[1]);
  if (s == NULL) return throwing(env) ? NULL : num(env, -EBADF);
  void *data;
  size_t len;
  if (napi_get_buffer_info(env, argv[2], &data, &len) != napi_ok) {
    napi_throw_type_error(env, "ERR_UDP_RELAY", "expected a Buffer");
    return NULL;
  }
  ssize_t w;
  if (argc >= 5) {
    struct sockaddr_storage to;
    socklen_t to_len;
    if (get_addr(env, argv[3], argv[4], &to, &to_len) != 0) return NULL;
    w = sendto(s->fd, data, len, MSG_DONTWAIT, (struct sockaddr *)&to, to_len);
  } else {
    w = send(s->fd, data, len, MSG_DONTWAIT);
  }
  return num(env, w < 0 ? -errno : 0);
}

/* reply(relay, buffer, ip, port) -> 0 or -errno: a datagram to a client from the listening socket. */
static napi_value js_reply(napi_env env, napi_callback_info info) {
  ARGS(4)
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  void *data;
  size_t len;
  if (napi_get_buffer_info(env, argv[1], &data, &len) != napi_ok) {
    napi_throw_type_error(env, "ERR_UDP_RELAY", "expected a Buffer");
    return NULL;
  }
  struct sockaddr_storage to;
  socklen_t to_len;
  if (get_addr(env, argv[2], argv[3], &to, &to_len) != 0) return NULL;
  ssize_t w = sendto(r->fd, data, len, MSG_DONTWAIT, (struct sockaddr *)&to, to_len);
  return num(env, w < 0 ? -errno : 0);
}

/* establish(relay, id, epoch): relay this session in C while the epoch holds; -1 stops it. */
static napi_value js_establish(napi_env env, napi_callback_info info) {
  ARGS(3)
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  session *s = get_session(env, r, argv[1]);
  int64_t e;
  if (s == NULL && throwing(env)) return NULL;
  if (get_int(env, argv[2], -1, INT32_MAX, "epoch must be an integer from -1 to 2^31-1", &e) != 0) return NULL;
  if (s != NULL) s->fast_epoch = s->connected ? (int32_t)e : -1;
  return NULL;
}

/* disconnect(relay, id) -> 0 or -errno: the session's socket stops being connected to its node. */
static napi_value js_disconnect(napi_env env, napi_callback_info info) {
  ARGS(2)
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  session *s = get_session(env, r, argv[1]);
  if (s == NULL) return throwing(env) ? NULL : num(env, -EBADF);
  struct sockaddr unspec;
  memset(&unspec, 0, sizeof unspec);
  unspec.sa_family = AF_UNSPEC;
  s->connected = 0;
  s->fast_epoch = -1;
  return num(env, connect(s->fd, &unspec, sizeof unspec) < 0 ? -errno : 0);
}

/* collect(relay) -> [id, rxBytes, txBytes, ...] for the sessions with traffic in C since the last call. */
static napi_value js_collect(napi_env env, napi_callback_info info) {
  ARGS(1)
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  napi_value out;
  napi_create_array_with_length(env, r->ntouched * 3, &out);
  uint32_t j = 0;
  for (uint32_t i = 0; i < r->ntouched; i++) {
    session *s = r->touched[i];
    s->touched = 0;
    if (s->closed) continue;
    napi_set_element(env, out, j++, num(env, s->id));
    napi_set_element(env, out, j++, num(env, s->rx));
    napi_set_element(env, out, j++, num(env, s->tx));
    s->rx = s->tx = 0;
  }
  r->ntouched = 0;
  return out;
}

/* close(relay, id) -> [rxBytes, txBytes] not yet collected. */
static napi_value js_close(napi_env env, napi_callback_info info) {
  ARGS(2)
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  session *s = get_session(env, r, argv[1]);
  if (s == NULL && throwing(env)) return NULL;
  napi_value out;
  napi_create_array_with_length(env, 2, &out);
  napi_set_element(env, out, 0, num(env, s == NULL ? 0 : s->rx));
  napi_set_element(env, out, 1, num(env, s == NULL ? 0 : s->tx));
  if (s != NULL) {
    /* A closed session may still sit in the touched list: collect() skips it, and its memory
     * lives until libuv's close callback, after which collect() has already run or is
     * cleared below. */
    for (uint32_t i = 0; i < r->ntouched; i++) {
      if (r->touched[i] == s) r->touched[i] = r->touched[--r->ntouched];
    }
    close_session(r, s);
  }
  return out;
}

/* stats(relay) -> [sessions, dropped, truncated] */
static napi_value js_stats(napi_env env, napi_callback_info info) {
  ARGS(1)
  relay *r = get_relay(env, argv[0]);
  if (r == NULL) return NULL;
  napi_value out;
  napi_create_array_with_length(env, 3, &out);
  napi_set_element(env, out, 0, num(env, r->count));
  napi_set_element(env, out, 1, num(env, r->dropped));
  napi_set_element(env, out, 2, num(env, r->truncated));
  return out;
}

/* relayed() -> datagrams relayed in C so far, both directions, by every relay of the process. */
static napi_value js_relayed(napi_env env, napi_callback_info info) {
  (void)info;
  return num(env, relayed_total);
}

/* drops() -> [dropped, truncated]: datagrams every relay of the process dropped so far (metrics). */
static napi_value js_drops(napi_env env, napi_callback_info info) {
  (void)info;
  napi_value out;
  napi_create_array_with_length(env, 2, &out);
  napi_set_element(env, out, 0, num(env, dropped_total));
  napi_set_element(env, out, 1, num(env, truncated_total));
  return out;
}

static napi_value js_destroy(napi_env env, napi_callback_info info) {
  ARGS(1)
  relay *r = NULL;
  if (napi_get_value_external(env, argv[0], (void **)&r) != napi_ok || r == NULL) {
    napi_throw_type_error(env, "ERR_UDP_RELAY", "not a udp relay");
    return NULL;
  }
  destroy_relay(r); /* a second call finds it destroyed and does nothing */
  return NULL;
}

NAPI_MODULE_INIT() {
  napi_property_descriptor props[] = {
    {"create", NULL, js_create, NULL, NULL, NULL, napi_enumerable, NULL},
    {"open", NULL, js_open, NULL, NULL, NULL, napi_enumerable, NULL},
    {"send", NULL, js_send, NULL, NULL, NULL, napi_enumerable, NULL},
    {"reply", NULL, js_reply, NULL, NULL, NULL, napi_enumerable, NULL},
    {"establish", NULL, js_establish, NULL, NULL, NULL, napi_enumerable, NULL},
    {"disconnect", NULL, js_disconnect, NULL, NULL, NULL, napi_enumerable, NULL},
    {"collect", NULL, js_collect, NULL, NULL, NULL, napi_enumerable, NULL},
    {"close", NULL, js_close, NULL, NULL, NULL, napi_enumerable, NULL},
    {"stats", NULL, js_stats, NULL, NULL, NULL, napi_enumerable, NULL},
    {"relayed", NULL, js_relayed, NULL, NULL, NULL, napi_enumerable, NULL},
    {"drops", NULL, js_drops, NULL, NULL, NULL, napi_enumerable, NULL},
    {"destroy", NULL, js_destroy, NULL, NULL, NULL, napi_enumerable, NULL},
  };
  napi_define_properties(env, exports, sizeof props / sizeof props[0], props);
  return exports;
}
