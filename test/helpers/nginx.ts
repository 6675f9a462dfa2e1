import { spawn } from 'node:child_process';
import { connect } from 'node:net';
import { chmodSync, existsSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { loopback, waitFor } from './backends.js';
import { freePort } from './tcp.js';

/** The nginx binary (Debian puts it in /usr/sbin, which is not always on PATH). */
export const NGINX_BIN = ['/usr/sbin/nginx', '/usr/bin/nginx'].find((p) => existsSync(p)) ?? 'nginx';

export interface NginxBackend {
  /** `ip:port` of each listen address (one server block: every address serves the same site). */
  addresses: string[];
  /**
   * Lines of the access log so far, one per request: `<connection serial> <requests on it>`.
   * nginx buffers nothing here (no `buffer=` on access_log), so a finished request is logged.
   */
  log(): Array<{ conn: number; n: number }>;
  close(): Promise<void>;
}

/**
 * nginx at its defaults (one worker) serving a small body on `count` loopback addresses.
 * `http` adds lines to the http block, e.g. `keepalive_requests 50;` to recycle connections
 * sooner than the default 1000; without it the keep-alive limits are nginx's own defaults
 * (keepalive_requests 1000, keepalive_timeout 75s).
 */
export async function startNginx(count: number, http = ''): Promise<NginxBackend> {
  const dir = mkdtempSync(join(tmpdir(), 'fulcrum-nginx-'));
  // nginx workers run as an unprivileged user when started as root: the folder must be readable.
  chmodSync(dir, 0o755);
  const addresses: string[] = [];
  for (let i = 0; i < count; i++) {
    const ip = loopback();
    addresses.push(`${ip}:${await freePort(ip)}`);
  }
  const logFile = join(dir, 'access.log');
  writeFileSync(join(dir, 'nginx.conf'), `
worker_processes 1;
daemon off;
master_process off;
pid ${dir}/nginx.pid;
error_log ${dir}/error.log warn;
events { worker_connections 1024; }
http {
  client_body_temp_path ${dir}/tmp-body;
  proxy_temp_path ${dir}/tmp-proxy;
  fastcgi_temp_path ${dir}/tmp-fastcgi;
  uwsgi_temp_path ${dir}/tmp-uwsgi;
  scgi_temp_path ${dir}/tmp-scgi;
  log_format conns '$connection $connection_requests';
  access_log ${logFile} conns;
  ${http}
  server {
    ${addresses.map((a) => `listen ${a};`).join('\n    ')}
    location / { default_type text/plain; return 200 "nginx\\n"; }
  }
}
`);
  const proc = spawn(NGINX_BIN, ['-c', join(dir, 'nginx.conf'), '-p', dir], { stdio: ['ignore', 'ignore', 'pipe'] });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => { stderr += d.toString(); });
  const exited = new Promise<void>((r) => proc.once('exit', () => r()));
  const close = async (): Promise<void> => {
    if (proc.exitCode === null && proc.signalCode === null) {
      proc.kill('SIGTERM');
      const t = setTimeout(() => proc.kill('SIGKILL'), 5_000);
      await exited;
      clearTimeout(t);
    }
    rmSync(dir, { recursive: true, force: true });
  };
  try {
    for (const a of addresses) {
      const [ip, port] = a.split(':');
      await waitFor(async () => {
        if (proc.exitCode !== null) throw new Error(`nginx exited: ${stderr}`);
        return new Promise<boolean>((resolve) => {
          const s = connect(Number(port), ip, () => {
            s.destroy();
            resolve(true);
          });
          s.on('error', () => resolve(false));
        });
      }, 15_000, `nginx listening on ${a}`);
    }
  } catch (e) {
    await close();
    throw e;
  }
  return {
    addresses,
    log: () => readFileSync(logFile, 'utf8').split('\n').filter((l) => l !== '').map((l) => {
      const [c, n] = l.split(' ');
      return { conn: Number(c), n: Number(n) };
    }),
    close,
  };
}
