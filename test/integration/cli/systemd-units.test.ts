import { afterAll, describe, expect, it } from 'vitest';
import { execFileSync, spawnSync } from 'node:child_process';
import { copyFileSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { DATAPLANE_NODE_FLAGS } from '../../../lib/node-flags.js';
import { repoRoot } from '../../helpers/lab.js';

const dir = join(repoRoot, 'scripts', 'systemd');
const units = ['fulcrum-control-plane.service', 'fulcrum-dataplane.service', 'fulcrum-agent.service'];
const commands: Record<string, string> = {
  'fulcrum-control-plane.service': 'control-plane',
  'fulcrum-dataplane.service': 'dataplane',
  'fulcrum-agent.service': 'agent',
};

/** An ini file as sections of key/value pairs (systemd's shape: no line outside a section). */
function parseIni(text: string): Map<string, [string, string][]> {
  const sections = new Map<string, [string, string][]>();
  let current: [string, string][] | undefined;
  text.split('\n').forEach((raw, i) => {
    const line = raw.trim();
    if (line === '' || line.startsWith('#') || line.startsWith(';')) return;
    const head = /^\[([A-Za-z]+)\]$/.exec(line);
    if (head) {
      current = [];
      sections.set(head[1]!, current);
      return;
    }
    const kv = /^([A-Za-z]+)=(.*)$/.exec(line);
    if (!kv || !current) throw new Error(`line ${i + 1} is neither a section nor key=value: ${line}`);
    current.push([kv[1]!, kv[2]!]);
  });
  return sections;
}

function run(args: string[]): { code: number; err: string } {
  const r = spawnSync(process.execPath, [join(repoRoot, 'bin', 'fulcrum.js'), ...args], { cwd: repoRoot, encoding: 'utf8', env: { ...process.env, FULCRUM_FROM_SOURCE: '1' }, timeout: 60_000 });
  return { code: r.status ?? -1, err: r.stderr };
}

// The unit files and example config files of docs/install.md.
describe('systemd units in scripts/systemd', () => {
  const tmp = mkdtempSync(join(tmpdir(), 'ops-systemd-'));
  afterAll(() => rmSync(tmp, { recursive: true, force: true }));

  it('have the ini shape, the three sections and an ExecStart that runs a fulcrum subcommand with its config file', () => {
    const help = execFileSync(process.execPath, [join(repoRoot, 'bin', 'fulcrum.js'), '--help'], { cwd: repoRoot, encoding: 'utf8', env: { ...process.env, FULCRUM_FROM_SOURCE: '1' } });
    for (const unit of units) {
      const ini = parseIni(readFileSync(join(dir, unit), 'utf8'));
      expect([...ini.keys()], unit).toEqual(['Unit', 'Service', 'Install']);
      const service = new Map(ini.get('Service'));
      const exec = service.get('ExecStart')!.split(/\s+/);
      const cmd = commands[unit]!;
      // The data plane's primary takes its V8 flags on the command line (lib/node-flags.ts).
      const node = cmd === 'dataplane' ? ['/usr/bin/node', ...DATAPLANE_NODE_FLAGS] : ['/usr/bin/node'];
      expect(exec, unit).toEqual([...node, '/opt/fulcrum/bin/fulcrum.js', cmd, '--config', `/etc/fulcrum/${cmd}.conf`]);
      expect(help, cmd).toMatch(new RegExp(`^  ${cmd} `, 'm'));
      expect(service.get('UMask'), unit).toBe('0077');
      // Only the agent runs as root (docs/install.md says why); the others get no more than they need.
      expect(service.get('User'), unit).toBe(cmd === 'agent' ? 'root' : 'fulcrum');
      const caps = { 'control-plane': '', dataplane: 'CAP_NET_BIND_SERVICE' }[cmd as 'control-plane' | 'dataplane'];
      if (caps !== undefined) {
        expect(service.get('CapabilityBoundingSet'), unit).toBe(caps);
        expect(service.get('NoNewPrivileges'), unit).toBe('yes');
      } else {
        expect(service.get('CapabilityBoundingSet')!.split(' '), unit).not.toContain('CAP_SYS_ADMIN');
        expect(service.get('KillMode'), unit).toBe('process');
      }
    }
  });

  it('pass systemd-analyze verify without a warning (with the pair-mode drop-in)', () => {
    const which = spawnSync('sh', ['-c', 'command -v systemd-analyze'], { encoding: 'utf8' });
    // This machine has systemd installed (scripts/install-system-deps.sh); the ini test above covers the rest.
    expect(which.status, 'systemd-analyze is installed').toBe(0);
    for (const unit of units) copyFileSync(join(dir, unit), join(tmp, unit));
    mkdirSync(join(tmp, 'fulcrum-dataplane.service.d'));
    copyFileSync(join(dir, 'fulcrum-dataplane.service.d', 'pair-mode.conf'), join(tmp, 'fulcrum-dataplane.service.d', 'pair-mode.conf'));
    for (const unit of units) {
      const r = spawnSync('systemd-analyze', ['verify', join(tmp, unit)], { encoding: 'utf8', env: { ...process.env, SYSTEMD_UNIT_PATH: `${tmp}:` } });
      // Warnings about other units on this machine are not ours; every line naming our file is.
      const ours = `${r.stdout}${r.stderr}`.split('\n').filter((l) => l.includes(tmp) || l.includes(unit));
      expect({ unit, status: r.status, ours }).toEqual({ unit, status: 0, ours: [] });
    }
  });

  it('ship example config files whose every key the command accepts', () => {
    const examples = readdirSync(dir).filter((f) => f.endsWith('.conf') && !f.startsWith('90-'));
    expect(examples.sort()).toEqual(['agent.conf', 'control-plane.conf', 'dataplane.conf']);
    for (const cmd of ['control-plane', 'dataplane', 'agent']) {
      // A flag that fails right after parsing, so that nothing starts: an unknown key would fail first.
      const stop = cmd === 'control-plane' ? ['--api-cert', join(tmp, 'absent.crt')] : ['--control-plane', 'not-an-address'];
      const r = run([cmd, '--config', join(dir, `${cmd}.conf`), '--state', join(tmp, cmd), ...stop]);
      expect(r.code, r.err).toBe(2);
      // The control plane's example sets api-cert and api-key (TLS on its 0.0.0.0 API): the absent certificate stops it.
      expect(r.err, cmd).toMatch(cmd === 'control-plane' ? /ENOENT.*absent\.crt/ : /"not-an-address" is not host:port/);
    }
  });
});
