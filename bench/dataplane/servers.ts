/**
 * The fixed parts of the data-plane bench: nginx backends (a small response and a 50 MB file,
 * keep-alive on), a self-signed certificate made with openssl, and HAProxy with one thread and a
 * configuration equivalent to the NodeBalancer we create (same ports, same backends, roundrobin,
 * no health checks, X-Forwarded-For/Proto added in http modes, TLS terminated for https with the
 * same TLS 1.2 cipher list as our `recommended` suite).
 */
import { chmodSync, mkdirSync, writeFileSync, readFileSync } from 'node:fs';
import { connect } from 'node:net';
import { join } from 'node:path';
import { RECOMMENDED_CIPHERS } from '../../dataplane/config/cipher-suites.js';
import { GiveUp, run, startProcess, waitFor, type Spawned } from '../common/processes.js';

export const BACKENDS = ['127.0.60.1', '127.0.60.2'];
export const BACKEND_PORT = 8080;
export const HAPROXY_IP = '127.0.70.1';
/** The bare Node relay's address (relay.ts), on the same ports as both proxies. */
export const RELAY_IP = '127.0.72.1';
export const PORTS = { http: 8080, tcp: 8081, https: 8443 } as const;
export const BIG_FILE_BYTES = 50 * 1024 * 1024;
export const SMALL_BODY = 'hello from the bench backend\n';

export async function startNginx(dir: string, nginxBin: string): Promise<Spawned> {
  const www = join(dir, 'www');
  mkdirSync(www, { recursive: true });
  // nginx workers run as an unprivileged user: the temp folder must be readable for them.
  chmodSync(dir, 0o755);
  writeFileSync(join(www, 'big'), Buffer.alloc(BIG_FILE_BYTES, 0x61));
  const conf = join(dir, 'nginx.conf');
  writeFileSync(conf, `
${nginxMain(dir, 'nginx', 8192)}
http {
  access_log off;
  client_body_temp_path ${dir}/tmp-body;
  proxy_temp_path ${dir}/tmp-proxy;
  fastcgi_temp_path ${dir}/tmp-fastcgi;
  uwsgi_temp_path ${dir}/tmp-uwsgi;
  scgi_temp_path ${dir}/tmp-scgi;
  keepalive_requests 10000000;
  keepalive_timeout 300s;
  sendfile on;
  tcp_nopush on;
  default_type application/octet-stream;
  server {
    ${BACKENDS.map((ip) => `listen ${ip}:${BACKEND_PORT} backlog=4096;`).join('\n    ')}
    root ${www};
    location = / { default_type text/plain; return 200 "${SMALL_BODY.replace('\n', '\\n')}"; }
    location = /big { }
  }
}
`);
  const p = startProcess('nginx', nginxBin, ['-c', conf, '-p', dir], dir);
  for (const ip of BACKENDS) await waitForPort(ip, BACKEND_PORT, () => p.proc.exitCode !== null ? `nginx exited (${readLog(dir, 'nginx-error.log')})` : undefined);
  return p;
}

/**
 * The main context every bench nginx shares: `workers` worker processes (default one), in the
 * foreground, its pid file and error log in `dir` under `name`, and `workerConnections`
 * connections per worker.
 */
export function nginxMain(dir: string, name: string, workerConnections: number, workers = 1): string {
  return `worker_processes ${workers};
daemon off;
pid ${dir}/${name}.pid;
error_log ${dir}/${name}-error.log warn;
events { worker_connections ${workerConnections}; }`;
}

export interface Cert {
  certFile: string;
  keyFile: string;
  cert: string;
  key: string;
}

export async function makeCert(dir: string): Promise<Cert> {
  const certFile = join(dir, 'cert.pem');
  const keyFile = join(dir, 'key.pem');
  await run('openssl', ['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', keyFile, '-out', certFile,
    '-days', '2', '-subj', '/CN=bench.fulcrum.test'], { timeoutMs: 30_000 });
  return { certFile, keyFile, cert: readFileSync(certFile, 'utf8'), key: readFileSync(keyFile, 'utf8') };
}

export async function startHaproxy(dir: string, haproxyBin: string, cert: Cert, threads = 1): Promise<Spawned> {
  const pem = join(dir, 'haproxy.pem');
  writeFileSync(pem, cert.cert + cert.key, { mode: 0o600 });
  const servers = (mode: string) => BACKENDS.map((ip, i) => `  server n${i + 1} ${ip}:${BACKEND_PORT} weight 100`).join('\n') + `\n  mode ${mode}\n  balance roundrobin`;
  const conf = join(dir, 'haproxy.cfg');
  writeFileSync(conf, `
global
  nbthread ${threads}
  maxconn 8000
  ssl-default-bind-ciphers ${RECOMMENDED_CIPHERS.join(':')}
  ssl-default-bind-options ssl-min-ver TLSv1.2

defaults
  timeout connect 5s
  timeout client 50s
  timeout server 50s
  timeout http-keep-alive 50s

frontend http_in
  mode http
  bind ${HAPROXY_IP}:${PORTS.http}
  option forwardfor
  http-request set-header X-Forwarded-Proto http
  default_backend web

frontend https_in
  mode http
  bind ${HAPROXY_IP}:${PORTS.https} ssl crt ${pem}
  option forwardfor
  http-request set-header X-Forwarded-Proto https
  default_backend web

frontend tcp_in
  mode tcp
  bind ${HAPROXY_IP}:${PORTS.tcp}
  default_backend tcp_nodes

backend web
${servers('http')}

backend tcp_nodes
${servers('tcp')}
`);
  await run(haproxyBin, ['-c', '-q', '-f', conf], { timeoutMs: 10_000 });
  const p = startProcess('haproxy', haproxyBin, ['-db', '-f', conf], dir);
  for (const port of Object.values(PORTS)) await waitForPort(HAPROXY_IP, port, () => p.proc.exitCode !== null ? `haproxy exited (${readLog(dir, 'haproxy.log')})` : undefined);
  return p;
}

function readLog(dir: string, name: string): string {
  try {
    return readFileSync(join(dir, name), 'utf8').trim().split('\n').slice(-5).join(' | ');
  } catch {
    return 'no log';
  }
}

/** Waits until something accepts TCP connections on ip:port. `dead` names a reason to give up. */
export function waitForPort(ip: string, port: number, dead: () => string | undefined = () => undefined, timeoutMs = 30_000): Promise<true> {
  return waitFor(`${ip}:${port} to accept connections`, () => {
    const why = dead();
    if (why) throw new GiveUp(why);
    return new Promise<true | undefined>((resolve) => {
      const s = connect({ host: ip, port });
      s.once('connect', () => {
        s.destroy();
        resolve(true);
      });
      s.once('error', () => resolve(undefined));
    });
  }, timeoutMs, 50);
}
