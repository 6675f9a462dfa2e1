import { execFileSync, spawn, type ChildProcess } from 'node:child_process';
import { existsSync, mkdirSync, mkdtempSync, openSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { request } from 'node:https';
import { connect } from 'node:net';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { makeCa, makeCert } from './certs.js';
import { repoRoot } from './lab.js';
import { freePort } from './tcp.js';

/**
 * A real S3-compatible object store for tests: OpenStack Swift (Debian's swift-* packages) with
 * its s3api middleware, on one loopback address, its proxy behind TLS with its own CA. One
 * device, one replica, four single-process servers (proxy, account, container, object): up in a
 * few seconds on two cores (docs/agent.md, "Backup store", says why Swift and not radosgw).
 */
export interface ObjectStore {
  /** https://HOST:PORT of the s3api proxy. */
  endpoint: string;
  host: string;
  region: string;
  bucket: string;
  /** PEM of the CA that signed the proxy's certificate; also written to `caFile`. */
  ca: string;
  caFile: string;
  accessKeyId: string;
  secretAccessKey: string;
  /** A 0600 JSON file `{ accessKeyId, secretAccessKey }` as agents read it (--backup-store-credentials). */
  credentialsFile: string;
  /** Where the object server keeps the objects' bytes (a test greps it for plaintext). */
  devicesDir: string;
  /** The keys of every object under `prefix` (ListObjectsV2 through the s3api proxy). */
  keys(prefix: string): Promise<string[]>;
  /** Stops the proxy only (the store is "down" for clients); `resume` starts it again on the same port. */
  pause(): Promise<void>;
  resume(): Promise<void>;
  stop(): Promise<void>;
}

const SERVERS = ['account', 'container', 'object'] as const;
const SWIFT_BINARY = '/usr/bin/swift-proxy-server';
const PYTHON = '/usr/bin/python3';

/** Installs the Swift packages the way every system dependency is installed (idempotent). */
function ensureInstalled(): void {
  if (existsSync(SWIFT_BINARY) && existsSync('/usr/bin/swift-object-server')) return;
  execFileSync('bash', [join(repoRoot, 'scripts', 'install-system-deps.sh')], { stdio: 'inherit' });
  if (!existsSync(SWIFT_BINARY)) throw new Error('Swift is not installed and scripts/install-system-deps.sh did not install it');
}

/** One ring per server, one device, one replica: built in a single Python start. */
function buildRings(dir: string, host: string, ports: Record<(typeof SERVERS)[number], number>): void {
  const script = `
import sys
from swift.common.ring import RingBuilder
d, host = sys.argv[1], sys.argv[2]
for name, port in zip(('account', 'container', 'object'), map(int, sys.argv[3:6])):
    b = RingBuilder(4, 1, 0)
    b.add_dev({'id': 0, 'region': 1, 'zone': 1, 'ip': host, 'port': port, 'device': 'd1', 'weight': 100, 'meta': ''})
    b.rebalance()
    b.get_ring().save('%s/%s.ring.gz' % (d, name))
`;
  execFileSync(PYTHON, ['-c', script, dir, host, String(ports.account), String(ports.container), String(ports.object)], { stdio: 'pipe' });
}

function https(url: string, ca: string, method = 'GET'): Promise<number> {
  return new Promise((resolve, reject) => {
    const req = request(url, { method, ca, timeout: 2000 }, (res) => {
      res.resume();
      res.on('end', () => resolve(res.statusCode ?? 0));
    });
    req.on('error', reject);
    req.on('timeout', () => req.destroy(new Error('timeout')));
    req.end();
  });
}

/** Whether something accepts a TCP connection on host:port. */
function listens(host: string, port: number): Promise<boolean> {
  return new Promise((resolve) => {
    const sock = connect({ host, port });
    sock.once('connect', () => {
      sock.destroy();
      resolve(true);
    });
    sock.once('error', () => resolve(false));
  });
}

async function waitFor(what: string, fn: () => Promise<boolean>, procs: ChildProcess[], logs: () => string, timeoutMs = 60_000): Promise<void> {
  const deadline = Date.now() + timeoutMs;
  for (;;) {
    const dead = procs.find((p) => p.exitCode !== null || p.signalCode !== null);
    if (dead) throw new Error(`${what}: a Swift server exited (${dead.spawnargs.join(' ')}): ${logs()}`);
    if (await fn().catch(() => false)) return;
    if (Date.now() > deadline) throw new Error(`${what}: not ready after ${timeoutMs} ms: ${logs()}`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

/**
 * Starts a store on `host` (a loopback address of the caller's own, or an address namespaced
 * hosts reach) with bucket `bucket` and one account whose S3 keys are returned.
 */
export async function startObjectStore(opts: { host?: string; bucket?: string } = {}): Promise<ObjectStore> {
  ensureInstalled();
  const host = opts.host ?? '127.0.0.1';
  const bucket = opts.bucket ?? 'fulcrum-backups';
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-s3-'));
  const devicesDir = join(dir, 'srv');
  mkdirSync(join(devicesDir, 'd1'), { recursive: true });
  const ports = { account: await freePort(host), container: await freePort(host), object: await freePort(host), proxy: await freePort(host) };
  buildRings(dir, host, ports);
  const ca = makeCa('Fulcrum Test Object Store CA');
  const leaf = makeCert(ca, host);
  const caFile = join(dir, 'ca.pem');
  writeFileSync(caFile, ca.cert);
  writeFileSync(join(dir, 'proxy.crt'), leaf.cert);
  writeFileSync(join(dir, 'proxy.key'), leaf.key, { mode: 0o600 });
  // The hash suffix only spreads objects over partitions; a test store needs no secret one.
  writeFileSync(join(dir, 'swift.conf'), '[swift-hash]\nswift_hash_path_suffix = fulcrum-test\nswift_hash_path_prefix = fulcrum-test\n\n[storage-policy:0]\nname = Policy-0\ndefault = yes\n');
  const common = (port: number) => `[DEFAULT]\nbind_ip = ${host}\nbind_port = ${port}\nworkers = 0\nswift_dir = ${dir}\ndevices = ${devicesDir}\nmount_check = false\ndisable_fallocate = true\nlog_name = swift\nlog_level = WARNING\nlog_address = /nonexistent\nlog_facility = LOG_LOCAL0\n`;
  for (const s of SERVERS) {
    writeFileSync(join(dir, `${s}-server.conf`), `${common(ports[s])}\n[pipeline:main]\npipeline = ${s}-server\n\n[app:${s}-server]\nuse = egg:swift#${s}\n`);
  }
  const accessKeyId = 'fulcrum:backups';
  const secretAccessKey = 'store-secret-' + Math.random().toString(36).slice(2);
  writeFileSync(join(dir, 'proxy-server.conf'), `${common(ports.proxy)}cert_file = ${join(dir, 'proxy.crt')}\nkey_file = ${join(dir, 'proxy.key')}\n
[pipeline:main]
pipeline = catch_errors gatekeeper healthcheck proxy-logging cache listing_formats s3api tempauth copy slo dlo proxy-logging proxy-server

[app:proxy-server]
use = egg:swift#proxy
account_autocreate = true
allow_account_management = true
# One backend of each kind: the proxy must never stop asking it. By default ten errors in a
# minute (a backend still starting on a loaded host refuses connections) "error-limit" it for
# 60 s, and every request meanwhile is a 503 ("Could not autocreate account").
error_suppression_interval = 1
error_suppression_limit = 1000000

[filter:s3api]
use = egg:swift#s3api
location = us-east-1
s3_acl = false
check_bucket_owner = false
min_segment_size = 5242880

[filter:tempauth]
use = egg:swift#tempauth
user_fulcrum_backups = ${secretAccessKey} .admin

[filter:cache]
use = egg:swift#memcache
memcache_servers = ${host}:1

[filter:catch_errors]
use = egg:swift#catch_errors
[filter:gatekeeper]
use = egg:swift#gatekeeper
[filter:healthcheck]
use = egg:swift#healthcheck
[filter:proxy-logging]
use = egg:swift#proxy_logging
[filter:listing_formats]
use = egg:swift#listing_formats
[filter:copy]
use = egg:swift#copy
[filter:slo]
use = egg:swift#slo
[filter:dlo]
use = egg:swift#dlo
`);
  const credentialsFile = join(dir, 'credentials.json');
  writeFileSync(credentialsFile, JSON.stringify({ accessKeyId, secretAccessKey }), { mode: 0o600 });

  const logFile = join(dir, 'servers.log');
  const logs = () => (existsSync(logFile) ? readFileSync(logFile, 'utf8').slice(-3000) : '');
  const startOne = (name: string): ChildProcess => {
    const out = openSync(logFile, 'a');
    // -v: the servers' log lines go to the log file too (no syslog in a test).
    return spawn(`/usr/bin/swift-${name}-server`, [join(dir, `${name}-server.conf`), '-v'], { stdio: ['ignore', out, out] });
  };
  const backends = SERVERS.map((s) => startOne(s));
  let proxy = startOne('proxy');
  const all = () => [...backends, proxy];
  const endpoint = `https://${host}:${ports.proxy}`;
  const stopProcs = async (ps: ChildProcess[]) => {
    await Promise.all(ps.map((p) => new Promise<void>((resolve) => {
      if (p.exitCode !== null || p.signalCode !== null) return resolve();
      p.once('exit', () => resolve());
      p.kill('SIGTERM');
      setTimeout(() => p.kill('SIGKILL'), 5000).unref();
    })));
  };
  try {
    // Each backend listening first: the proxy's health check says nothing about them.
    for (const s of SERVERS) await waitFor(`Swift ${s} server`, () => listens(host, ports[s]), all(), logs);
    await waitFor('Swift proxy', async () => (await https(`${endpoint}/healthcheck`, ca.cert)) === 200, all(), logs);
    const { S3Client, CreateBucketCommand } = await import('@aws-sdk/client-s3');
    const { Agent } = await import('node:https');
    const client = new S3Client({
      endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId, secretAccessKey },
      requestHandler: { httpsAgent: new Agent({ ca: ca.cert }) },
    });
    // The backends may still be binding when the proxy answers its health check.
    await waitFor('bucket creation', async () => {
      await client.send(new CreateBucketCommand({ Bucket: bucket }));
      return true;
    }, all(), logs, 60_000);
    client.destroy();
  } catch (err) {
    await stopProcs(all());
    rmSync(dir, { recursive: true, force: true });
    throw err;
  }
  return {
    endpoint, host, region: 'us-east-1', bucket, ca: ca.cert, caFile, accessKeyId, secretAccessKey, credentialsFile, devicesDir,
    async keys(prefix) {
      const { S3Client, ListObjectsV2Command } = await import('@aws-sdk/client-s3');
      const { Agent } = await import('node:https');
      const client = new S3Client({
        endpoint, region: 'us-east-1', forcePathStyle: true, credentials: { accessKeyId, secretAccessKey },
        requestHandler: { httpsAgent: new Agent({ ca: ca.cert }) },
      });
      try {
        const out: string[] = [];
        let token: string | undefined;
        do {
          const r = await client.send(new ListObjectsV2Command({ Bucket: bucket, Prefix: prefix, ContinuationToken: token }));
          out.push(...(r.Contents ?? []).map((x) => x.Key!));
          token = r.NextContinuationToken;
        } while (token);
        return out;
      } finally {
        client.destroy();
      }
    },
    async pause() {
      await stopProcs([proxy]);
    },
    async resume() {
      // Only a stopped proxy is started again: tests resume in a finally or afterAll as well as in
      // the test body, and a second proxy started beside a running one (Swift binds its port with
      // SO_REUSEPORT) was left running for ever, since stop() knows only the newest.
      if (proxy.exitCode === null && proxy.signalCode === null) return;
      proxy = startOne('proxy');
      await waitFor('Swift proxy (resumed)', async () => (await https(`${endpoint}/healthcheck`, ca.cert)) === 200, all(), logs);
    },
    async stop() {
      await stopProcs(all());
      rmSync(dir, { recursive: true, force: true });
    },
  };
}
