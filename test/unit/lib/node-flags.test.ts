import { execFileSync } from 'node:child_process';
import { chmodSync, mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { describe, expect, it } from 'vitest';
import { DATAPLANE_NODE_FLAGS, withDataplaneHeapFlags } from '../../../lib/node-flags.js';
import { repoRoot } from '../../helpers/lab.js';

describe('the data plane\'s V8 flags', () => {
  it('adds the semi-space cap, keeps what was given, and leaves an operator\'s own size alone', () => {
    expect(DATAPLANE_NODE_FLAGS).toEqual(['--max-semi-space-size=16']);
    expect(withDataplaneHeapFlags([])).toEqual(['--max-semi-space-size=16']);
    expect(withDataplaneHeapFlags(['--enable-source-maps'])).toEqual(['--enable-source-maps', '--max-semi-space-size=16']);
    expect(withDataplaneHeapFlags(['--max-semi-space-size=32'])).toEqual(['--max-semi-space-size=32']);
  });

  it('are what the container image\'s entrypoint gives node for the data plane, and only for it', () => {
    // A `node` first on PATH that prints its arguments, one a line, in place of the image's.
    const dir = mkdtempSync(join(tmpdir(), 'unit-entrypoint-'));
    try {
      writeFileSync(join(dir, 'node'), '#!/bin/sh\nprintf \'%s\\n\' "$@"\n');
      chmodSync(join(dir, 'node'), 0o755);
      const run = (...args: string[]) => execFileSync('sh', [join(repoRoot, 'docker', 'entrypoint.sh'), ...args], {
        encoding: 'utf8', env: { ...process.env, PATH: `${dir}:${process.env.PATH ?? ''}` },
      }).split('\n').filter(Boolean);
      expect(run('dataplane', '--config', '/etc/fulcrum/dataplane.conf'))
        .toEqual([...DATAPLANE_NODE_FLAGS, '/opt/fulcrum/bin/fulcrum.js', 'dataplane', '--config', '/etc/fulcrum/dataplane.conf']);
      expect(run('control-plane', '--state', '/var/lib/fulcrum')).toEqual(['/opt/fulcrum/bin/fulcrum.js', 'control-plane', '--state', '/var/lib/fulcrum']);
      expect(run('agent', 'dataplane')).toEqual(['/opt/fulcrum/bin/fulcrum.js', 'agent', 'dataplane']);
      expect(run()).toEqual(['/opt/fulcrum/bin/fulcrum.js']);
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});
