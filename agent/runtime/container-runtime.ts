/**
 * The ContainerRuntime port: how the agent runs one MySQL-compatible server ("node").
 *
 * Two adapters implement it and both must pass the shared contract suite in
 * test/integration/agent/runtime-contract.ts:
 * - `process` (agent/runtime/process-runtime.ts): a local `mariadbd`/`mysqld` child process,
 *   detached so that it outlives the agent, found again through a metadata file.
 * - `docker` (agent/runtime/docker-runtime.ts): one container per node (dockerode), labelled,
 *   host networking so that the node listens on `spec.host:spec.port` exactly as a process does.
 *
 * The agent above this port never knows which adapter it drives. Everything the server needs
 * (config, certificates, key files) travels in the spec; the adapter decides where those files
 * live and substitutes the path tokens below in `spec.config` with paths as the server sees them
 * (host paths for a process, mount points inside a container).
 *
 * Path tokens usable in `spec.config` and `spec.files` contents:
 * - `{{DATA_DIR}}`  the server's data directory (`spec.dataDir` on the host).
 * - `{{CONF_DIR}}`  the directory holding every entry of `spec.files`.
 * - `{{RUN_DIR}}`   a directory for the pid file and Unix socket.
 * - `{{SOCKET}}`    the Unix socket path (inside RUN_DIR).
 *
 * Naming: `spec.name` is unique per host and stable for the life of the node; the agent names
 * nodes `f<agent>-db<id>-n<index>`, `<agent>` being the first 6 hex digits of the SHA-256 of the
 * agent id (agent/database/node-spec.ts), so agents sharing a host never collide. Every method
 * takes that name, never an adapter-internal id.
 */

/** Labels put on every managed node, so that a restarted agent can list what it runs. */
export const LABEL_MANAGED = 'fulcrum.managed';
export const LABEL_AGENT = 'fulcrum.agent';
export const LABEL_DATABASE = 'fulcrum.database';
export const LABEL_NODE = 'fulcrum.node';

/** What the runtime must run. Pure data; JSON-serialisable (the process adapter persists it). */
export interface NodeSpec {
  /** Unique, stable, `[a-z0-9-]+`; the container name or the process's metadata key. */
  name: string;
  /** Free-form labels; the agent always sets the four LABEL_* keys above. */
  labels: Record<string, string>;
  /** The catalogue entry to run: `image` for docker, `binary` (mariadbd/mysqld path) for process. */
  engine: { id: string; version: string; image?: string; binary?: string };
  /**
   * Host directory holding the server's data. If it is empty (or missing) when the node is
   * ensured, the adapter initialises it (mariadb-install-db or equivalent) with
   * `root@localhost` reachable over the Unix socket with an empty password and no other
   * accounts; the agent's bootstrap secures it. A non-empty data dir is used as it is.
   */
  dataDir: string;
  /**
   * The body of the server's option file, `[mysqld]` group header included; may use path
   * tokens. It must not set datadir, socket, pid-file, port or bind-address: the adapter
   * passes those itself (from dataDir, RUN_DIR, host and port) so they cannot disagree.
   */
  config: string;
  /** Extra files written to CONF_DIR before start (certificates, key files), name -> content. */
  files: Record<string, string>;
  /** Address and TCP port the server listens on; always a loopback (127.x) address. */
  host: string;
  port: number;
  /** Resource limits of the database type; docker enforces both, process documents its limits. */
  memoryMb: number;
  cpus: number;
}

export type NodeState = 'running' | 'stopped' | 'missing';

/** What runs (or ran) under a name. */
export interface NodeStatus {
  name: string;
  state: NodeState;
  labels: Record<string, string>;
  /** The spec the node was last ensured with (undefined only when state is 'missing'). */
  spec?: NodeSpec;
  /** OS pid (process) or container id (docker), for logs and diagnostics only. */
  ref?: string;
  /** Exit detail when stopped unexpectedly, if the adapter knows it. */
  detail?: string;
}

/** How the agent reaches a node for administration. */
export interface NodeConnection {
  /** TCP address of the node (what replicas and the data planes' database endpoints dial). */
  host: string;
  port: number;
  /**
   * Unix socket path on the agent's host. Admin sessions use it: the socket counts as a secure
   * transport (require_secure_transport does not apply) and `root@localhost` matches only it.
   */
  socketPath: string;
}

export interface ContainerRuntime {
  /** `process` or `docker`; used in logs and metrics labels only. */
  readonly kind: string;

  /**
   * Makes the node exist and run with this spec. Idempotent: a node already running with an
   * equal spec is left alone; a stopped one is started; one whose spec differs is stopped,
   * re-created with the new spec (keeping its data dir) and started. Initialises an empty data
   * dir first. Resolves once the server accepts connections on its Unix socket; rejects with
   * a FulcrumError naming the node and the server's last log lines when it does not start
   * within `timeoutMs` (default 60 s), leaving the node stopped.
   */
  ensure(spec: NodeSpec, opts?: { timeoutMs?: number }): Promise<NodeStatus>;

  /** Starts a stopped node with its last spec. No-op when running; rejects when missing. */
  start(name: string, opts?: { timeoutMs?: number }): Promise<void>;

  /**
   * Stops the node gracefully (SIGTERM / docker stop), escalating to a kill after
   * `graceMs` (default 30 s). Resolves when the server has exited. No-op when stopped or missing.
   */
  stop(name: string, opts?: { graceMs?: number }): Promise<void>;

  /**
   * Kills the node at once (SIGKILL), simulating a crash. For failover tests and for
   * abandoning a node that will be rebuilt. No-op when not running.
   */
  kill(name: string): Promise<void>;

  /**
   * Stops and forgets the node: nothing of it remains (process, container, socket, metadata).
   * `withData` also deletes `spec.dataDir` and CONF_DIR. Idempotent: removing a missing node
   * resolves.
   */
  remove(name: string, opts?: { withData?: boolean }): Promise<void>;

  /** The node's status; `state: 'missing'` instead of throwing when unknown. */
  inspect(name: string): Promise<NodeStatus>;

  /**
   * Every node whose labels include all of `labels` (an empty filter lists every node this
   * runtime manages), running or stopped. This is how an agent finds its nodes after a restart.
   */
  list(labels: Record<string, string>): Promise<NodeStatus[]>;

  /** Where to reach the node; valid whenever the node exists (running or not). */
  connection(name: string): Promise<NodeConnection>;

  /** The last `lines` lines (default 50) of the server's error log, for error reports. */
  logs(name: string, lines?: number): Promise<string>;

  /**
   * Runs a client tool of the node's engine (`mariadb-dump`, `mariadb`) against the node, with
   * the same binaries the node runs (for docker: inside the container). The adapter inserts
   * `--socket=<SOCKET>` as the first option after the program name; the caller passes
   * credentials (`--user`, and the password in `env.MYSQL_PWD`, never on the command line).
   * `stdin` is piped in (its end is the program's EOF); stdout is returned, or streamed to
   * `stdout` when given, honouring back-pressure, and that stream is ended when the program's
   * output ends, before the promise resolves (the returned stdout is then empty); if the caller
   * destroys that stream first, the program is stopped. Never uses a shell. Resolves with the
   * exit code; rejects only when the program cannot be started. `noSocket` leaves `--socket` out,
   * for the engine's tools that are no client of the server and refuse the option (`mbstream`).
   * `signal`: once aborted the program is stopped (the process runtime terminates it; on docker
   * its output is cut, and the container's removal ends it), and the promise resolves with the
   * exit code it got; a database's delete cancels its backups this way (docs/agent.md, "Delete").
   * `stdoutFd` instead of `stdout`: an open file the output is written into, from its current
   * offset, and left open. The process runtime hands it to the program as its stdout, so the
   * output never waits on the agent's event loop (mariadb-backup's redo-log copy must keep pace
   * with the server, docs/agent.md §6); docker copies its output into it.
   */
  exec(
    name: string,
    argv: string[],
    io?: { stdin?: NodeJS.ReadableStream; stdout?: NodeJS.WritableStream; stdoutFd?: number; env?: Record<string, string>; noSocket?: boolean; signal?: AbortSignal },
  ): Promise<{ exitCode: number; stdout: string; stderr: string }>;

  /**
   * Optional warm-up: makes the first `ensure` of this engine fast (process: builds the template
   * data dir; docker: checks the image is present). Called by the agent at start for every
   * catalogue entry, in the background; failures only log.
   */
  prepare?(engine: NodeSpec['engine']): Promise<void>;

  /** Releases adapter resources (never stops nodes: they outlive the agent). */
  close(): Promise<void>;
}

/** Replaces path tokens; adapters call it on `config` and every `files` entry. */
export function substitutePaths(
  text: string,
  paths: { dataDir: string; confDir: string; runDir: string; socket: string },
): string {
  return text
    .replaceAll('{{DATA_DIR}}', paths.dataDir)
    .replaceAll('{{CONF_DIR}}', paths.confDir)
    .replaceAll('{{RUN_DIR}}', paths.runDir)
    .replaceAll('{{SOCKET}}', paths.socket);
}

/** True when two specs would run the same server (the idempotence test of `ensure`). */
export function sameSpec(a: NodeSpec, b: NodeSpec): boolean {
  return JSON.stringify(comparableSpec(a)) === JSON.stringify(comparableSpec(b));
}

const PROXY_NETWORKS_LINE = /^proxy_protocol_networks=.*$/m;

/**
 * What of a spec decides whether a node must be re-created (sameSpec, the docker runtime's spec
 * hash). The proxy_protocol_networks line is read as `localhost`, the value every spec had before
 * the data planes' addresses were written into it: a data plane joining or leaving is applied to
 * running members with SET GLOBAL (agent/database/endpoints.ts), never by a restart, and nodes
 * created before keep their hash.
 */
export function comparableSpec(s: NodeSpec): NodeSpec {
  const sortObj = (o: Record<string, string>) => Object.fromEntries(Object.entries(o).sort(([x], [y]) => x.localeCompare(y)));
  const config = s.config.replace(PROXY_NETWORKS_LINE, 'proxy_protocol_networks=localhost');
  return { ...s, config, labels: sortObj(s.labels), files: sortObj(s.files), engine: { ...s.engine } };
}
