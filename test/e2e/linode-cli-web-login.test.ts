import { chmodSync, existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { hostname, tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterAll, beforeAll, describe, expect, it } from 'vitest';
import type { Browser } from 'puppeteer-core';
import { startApi, type ApiHarness } from '../helpers/api-harness.js';
import { chromiumPath, launch, watchErrors } from '../helpers/browser.js';
import { until } from '../helpers/lab.js';
import { ensureLinodeCli, LINODE_CLI_VERSION, run } from '../helpers/linode-cli.js';

/**
 * linode-cli's own web login (`linode-cli configure` without `--token`) against an install, with
 * a person in headless Chromium (docs/compatibility.md, "Signing in and pointing clients at an
 * install"). linode-cli opens its fixed https://login.linode.com/... URL through Python's
 * `webbrowser`, which runs `$BROWSER`: here a two-line `chromium` script that only hands the URL
 * to the test. The test does what the docs tell a person to do, open that URL with the login's
 * address replaced by the install's `/login`, and signs in there; Chromium then lands on
 * linode-cli's local port, its landing page sends the token from the fragment to linode-cli,
 * which reads `GET /profile`, makes its long-lived token with `POST /profile/tokens` and writes its
 * configuration. Serial lane: it shares linode-cli's cached virtual environment with
 * readme-linode-cli, which may be making it.
 */
describe(`linode-cli ${LINODE_CLI_VERSION} web login`, () => {
  let api: ApiHarness;
  let browser: Browser;
  let work: string;
  let bin: string;

  beforeAll(async () => {
    expect(existsSync(chromiumPath), chromiumPath).toBe(true);
    bin = (await ensureLinodeCli()).bin;
    api = await startApi();
    browser = await launch();
    work = mkdtempSync(join(tmpdir(), 'fulcrum-cli-login-'));
  }, 600_000);
  afterAll(async () => {
    await browser?.close();
    await api?.close();
    if (work) rmSync(work, { recursive: true, force: true });
  });

  it('configures itself through the install\'s login: implicit grant, localhost redirect, token from the fragment', async () => {
    const home = join(work, 'home');
    const fakeBin = join(work, 'bin');
    const opened = join(work, 'opened-url');
    for (const d of [home, fakeBin]) rmSync(d, { recursive: true, force: true });
    mkdirSync(home);
    mkdirSync(fakeBin);
    // Named `chromium` so that linode-cli counts it as a known browser and asks nothing more.
    writeFileSync(join(fakeBin, 'chromium'), `#!/bin/sh\nprintf '%s\\n' "$1" > "${opened}.tmp" && mv "${opened}.tmp" "${opened}"\n`);
    chmodSync(join(fakeBin, 'chromium'), 0o755);
    const host = new URL(api.url).host;
    // Enter to open the browser; then, after the login, Enter for the default region, type, image
    // and SSH user, a custom API target (this install), and no suppression of version warnings.
    const answers = ['', '', '', '', '', 'y', host, 'v4', 'http', 'n', ''].join('\n');
    const cli = run(join(bin, 'linode-cli'), ['configure'], {
      env: { PATH: `${fakeBin}:${bin}:/usr/bin:/bin`, HOME: home, COLUMNS: '200', BROWSER: 'chromium', LINODE_CLI_API_HOST: host, LINODE_CLI_API_SCHEME: 'http' },
      input: answers,
    });

    const url = await until('linode-cli opened the browser', () => (existsSync(opened) ? readFileSync(opened, 'utf8').trim() : undefined), 60_000, 100);
    const m = /^https:\/\/login\.linode\.com\/oauth\/authorize\?client_id=5823b4627e45411d18e9&response_type=token&scopes=\*&redirect_uri=http:\/\/localhost:(\d+)$/.exec(url);
    expect(m, url).not.toBeNull();

    const page = await browser.newPage();
    const errors = watchErrors(page);
    await page.goto(url.replace('https://login.linode.com/', `${api.url}/login/`));
    await page.waitForSelector('#token', { timeout: 60_000 });
    await page.type('#token', api.token);
    await Promise.all([page.waitForNavigation({ timeout: 60_000 }), page.click('button[type=submit]')]);
    expect(new URL(page.url()).host).toBe(`localhost:${m![1]}`);

    const r = await cli;
    expect(r.code, r.stdout + r.stderr).toBe(0);
    expect(r.stdout).toContain('Configuring admin');
    const file = join(home, '.config', 'linode-cli');
    expect(statSync(file).mode & 0o777).toBe(0o600);
    const saved = /^token = ([0-9a-f]+)$/m.exec(readFileSync(file, 'utf8'))?.[1];
    expect(saved).toBeDefined();
    expect(saved).not.toBe(api.token);
    // The token it keeps is the one it made with the login's two-hour token.
    const tokens = await api.req('GET', '/v4/profile/tokens', { token: saved! });
    const labels = tokens.body.data.map((t: { label: string }) => t.label);
    expect(labels).toContain(`Linode CLI @ ${hostname()}`);
    expect(labels).toContain('linode-cli (OAuth)');

    const profile = await run(join(bin, 'linode-cli'), ['profile', 'view', '--json'], { env: { PATH: `${bin}:/usr/bin:/bin`, HOME: home, COLUMNS: '200' } });
    expect(profile.code, profile.stdout + profile.stderr).toBe(0);
    expect(JSON.parse(profile.stdout)[0].username).toBe('admin');
    // linode-cli stops its local server once it has the token; the browser's favicon request then finds nothing.
    expect(errors.filter((e) => !e.includes(`localhost:${m![1]}/favicon.ico`))).toEqual([]);
    await page.close();
  }, 180_000);
});
