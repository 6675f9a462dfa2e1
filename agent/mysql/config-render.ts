/**
 * Renders a node's server options (docs/agent.md §3). Pure: the same
 * input always gives the same text, so the runtime's spec comparison detects real changes only.
 *
 * Every node gets the same replication settings whatever its role, so that any node can be
 * promoted: binlog with GTIDs, log_slave_updates, gtid_strict_mode, and read_only at boot with
 * skip_slave_start, so that a crashed primary comes back read-only and no stale replication
 * configuration starts before the agent has decided the roles.
 */
export interface NodeConfigInput {
  databaseId: number;
  /** 1-based node index. */
  index: number;
  /** The server_id: the index, unless the control plane gave the member another (DesiredMember). */
  serverId?: number;
  memoryMb: number;
  semiSync: boolean;
  /**
   * A cluster spread over hosts: the primary waits for a replica's acknowledgement without end
   * (never falls back to asynchronous), so a primary cut off from its replicas acknowledges no
   * write (docs/databases.md, "Clusters across hosts").
   */
  semiSyncNoFallback?: boolean;
  ssl: boolean;
  encrypted: boolean;
  /** The database's engine_config variables that need a restart (docs/databases.md), name -> value. */
  options?: Record<string, string>;
  /**
   * proxy_protocol_networks at start (agent/database/endpoints.ts): the Unix socket and the data
   * planes' addresses. Default `localhost`. The runtimes' spec comparison ignores this line.
   */
  proxyNetworks?: string;
}

const OPTION_NAME = /^[a-z][a-z0-9_]*$/;
const OPTION_VALUE = /^[A-Za-z0-9_+:,/.-]*$/;

/**
 * engine_config lines, after Fulcrum's own (the last setting of a name wins). A name Fulcrum sets
 * itself is never overridden (replication, confinement and TLS are not the tenant's to change),
 * and a name or value that could break out of its line is dropped: the control plane only sends
 * validated ones, so either would be a bug or a forged desired state.
 */
function optionLines(options: Record<string, string>, own: Set<string>): string[] {
  return Object.keys(options).sort()
    .filter((name) => OPTION_NAME.test(name) && OPTION_VALUE.test(options[name]!) && !own.has(name))
    .map((name) => `${name}=${options[name]}`);
}

/** A small fraction of the plan's memory goes to the buffer pool: lab hosts run many nodes. */
export function bufferPoolMb(memoryMb: number): number {
  return Math.max(32, Math.min(Math.floor(memoryMb / 8), 4096));
}

export function renderNodeConfig(c: NodeConfigInput): string {
  const lines = [
    '[mysqld]',
    `server_id=${c.serverId || c.index}`,
    `log_basename=db${c.databaseId}-n${c.index}`,
    'log_bin',
    'binlog_format=ROW',
    'log_slave_updates=ON',
    'gtid_strict_mode=ON',
    'sync_binlog=1',
    'innodb_flush_log_at_trx_commit=1',
    'read_only=ON',
    'skip_slave_start=ON',
    'skip_name_resolve=ON',
    'slave_net_timeout=4',
    'character_set_server=utf8mb4',
    `innodb_buffer_pool_size=${bufferPoolMb(c.memoryMb)}M`,
    `innodb_log_file_size=${Math.max(16, bufferPoolMb(c.memoryMb) / 4)}M`,
    'max_connections=200',
    'performance_schema=OFF',
    'expire_logs_days=7',
    // Tenant confinement (docs/security/mysql.md): no file reads or writes through SQL (the
    // directory is empty and not writable by the server's user), no client-side file loading,
    // and PROXY headers only over the Unix socket, whose directory only the agent and the
    // server's own user can enter, so no other local user can claim a client address, and from
    // the data planes' addresses.
    'secure_file_priv={{RUN_DIR}}/no-files',
    'local_infile=OFF',
    // linroot has no SUPER; without this, binary logging refuses its triggers and functions
    // (the managed services' usual setting: the check is about replay determinism, not privilege).
    'log_bin_trust_function_creators=ON',
    // Written at every (re)start, so a member that comes back serves the data planes' PROXY
    // headers from its first connection; later changes are applied with SET GLOBAL, no restart.
    `proxy_protocol_networks=${c.proxyNetworks ?? 'localhost'}`,
    // Runs before the first connection is accepted, on every start: root has its password
    // from the first start on, and the system accounts are repaired (agent/mysql/init-sql.ts).
    'init_file={{CONF_DIR}}/init.sql',
  ];
  if (c.semiSync) {
    // The master side is switched on by the agent on the primary only (replication.promote): a
    // replica with it on would make its own applier wait for acks nobody sends.
    lines.push(
      'rpl_semi_sync_slave_enabled=ON',
      'rpl_semi_sync_master_wait_point=AFTER_SYNC',
      // The largest timeout MariaDB takes (about 49 days): in effect, no fallback.
      `rpl_semi_sync_master_timeout=${c.semiSyncNoFallback ? 4294967295 : 5000}`,
      'sync_relay_log=1',
    );
    // Also wait with no replica connected at all (MariaDB's default, pinned here on purpose).
    if (c.semiSyncNoFallback) lines.push('rpl_semi_sync_master_wait_no_slave=ON');
  }
  // Certificates are always installed (replication uses TLS too); ssl_connection only decides
  // whether clients may skip it.
  lines.push('ssl_ca={{CONF_DIR}}/ca.pem', 'ssl_cert={{CONF_DIR}}/server.pem', 'ssl_key={{CONF_DIR}}/server-key.pem');
  lines.push(`require_secure_transport=${c.ssl ? 'ON' : 'OFF'}`);
  if (c.encrypted) {
    lines.push(
      'plugin_load_add=file_key_management',
      'file_key_management_filename={{CONF_DIR}}/keyfile',
      'file_key_management_encryption_algorithm=AES_CTR',
      'innodb_encrypt_tables=ON',
      'innodb_encrypt_log=ON',
      'innodb_encrypt_temporary_tables=ON',
      'innodb_encryption_threads=2',
      'encrypt_binlog=ON',
      'encrypt_tmp_disk_tables=ON',
      'encrypt_tmp_files=ON',
      'aria_encrypt_tables=ON',
    );
  }
  const own = new Set(lines.map((l) => l.split('=')[0]!));
  lines.push(...optionLines(c.options ?? {}, own));
  return `${lines.join('\n')}\n`;
}
