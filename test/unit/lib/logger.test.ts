import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync, symlinkSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { fileURLToPath } from 'node:url';
import { Writable } from 'node:stream';
import { describe, expect, it } from 'vitest';
import { createLogger, errForLog, withoutStatementText } from '../../../lib/logger.js';

/** A mysql2-shaped error: `sql` holds the statement as sent, the message quotes part of it. */
function driverError(): Error {
  const e = new Error("You have an error in your SQL syntax; check the manual for the right syntax to use near 'BY 'pw-1'' at line 1");
  Object.assign(e, { code: 'ER_PARSE_ERROR', sql: "ALTER USER IDENTIFIED BY 'pw-1'", sqlMessage: e.message });
  return e;
}

describe('errForLog', () => {
  it('drops sql and the quoted statement, keeps what says what failed', () => {
    const out = JSON.stringify(errForLog(driverError()));
    expect(out).not.toContain('pw-1');
    expect(out).toContain('ER_PARSE_ERROR');
    expect(out).toContain("near '[redacted]' at line ?");
  });

  it('covers a cause, an aggregate, an error under another key of the error, and a message string', () => {
    const wrapped = new Error('restore failed', { cause: driverError() });
    const agg = new AggregateError([driverError()], 'several');
    const holder = Object.assign(new Error('outer'), { inner: driverError() });
    for (const e of [wrapped, agg, holder, driverError().message]) expect(JSON.stringify(errForLog(e))).not.toContain('pw-1');
    expect(errForLog(undefined)).toBeUndefined();
  });

  it('is what every logger writes for err', () => {
    let out = '';
    const log = createLogger('t', { destination: new Writable({ write: (c, _e, done) => void ((out += c.toString()), done()) }) });
    log.child({ component: 'x' }).error({ err: driverError() }, 'failed');
    expect(out).toContain('"msg":"failed"');
    expect(out).not.toContain('pw-1');
  });
});

describe('withoutStatementText', () => {
  it('takes out what a parse error and a replica\'s SQL-thread error quote, keeps the rest', () => {
    const sqlThread = "Error 'Operation ALTER USER failed' on query. Default database: 'app'. Query: 'ALTER USER 'u'@'%' IDENTIFIED BY 'pw-2''";
    expect(withoutStatementText(sqlThread)).toBe("Error 'Operation ALTER USER failed' on query. Default database: 'app'. Query: '[redacted]'");
    expect(withoutStatementText(driverError().message)).not.toContain('pw-1');
    expect(withoutStatementText('connect ECONNREFUSED 127.0.0.1:3306')).toBe('connect ECONNREFUSED 127.0.0.1:3306');
  });
});

describe('a logger whose destination fails', () => {
  it('says so once and goes on (a full disk: a log file linked to /dev/full), never an error that ends the process', async () => {
    const dir = mkdtempSync(join(tmpdir(), 'fulcrum-logger-'));
    try {
      const file = join(dir, 'agent.log');
      symlinkSync('/dev/full', file);
      const lost: Error[] = [];
      let said: () => void = () => undefined;
      const saidOnce = new Promise<void>((resolve) => (said = resolve));
      const log = createLogger('agent', { destination: file, onLost: (err) => {
        lost.push(err);
        said();
      } });
      log.info('first');
      await saidOnce;
      // The next lines fail too, and are not said again.
      for (let i = 0; i < 3; i++) log.warn({ i }, 'more');
      await new Promise<void>((resolve) => log.flush(() => resolve()));
      expect(lost).toHaveLength(1);
      expect((lost[0] as NodeJS.ErrnoException).code).toBe('ENOSPC');
    } finally {
      rmSync(dir, { recursive: true, force: true });
    }
  });
});

describe('a note for the operator on stderr', () => {
  it('is lost, never the end of the process, when stderr is a broken pipe (a daemon whose journal restarted)', async () => {
    const logger = fileURLToPath(new URL('../../../lib/logger.ts', import.meta.url));
    const child = spawn(process.execPath, ['--import', 'tsx', '--input-type=module', '-e', [
      `import { sayOnStderr } from ${JSON.stringify(logger)};`,
      'for (let i = 0; i < 200; i++) sayOnStderr("reload: new workers serve, the old ones drain\\n");',
      'process.stdout.write("still here\\n");',
    ].join('\n')], { stdio: ['ignore', 'pipe', 'pipe'], cwd: fileURLToPath(new URL('../../..', import.meta.url)) });
    // The read end closes before the child writes: every write of it meets EPIPE.
    child.stderr.destroy();
    let out = '';
    child.stdout.on('data', (d: Buffer) => (out += d.toString()));
    const code = await new Promise<number | null>((resolve) => child.once('close', resolve));
    expect(out).toBe('still here\n');
    expect(code).toBe(0);
  }, 30_000);
});
