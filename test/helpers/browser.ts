import { execFileSync } from 'node:child_process';
import { copyFileSync, existsSync, mkdirSync, readFileSync, readdirSync, statSync } from 'node:fs';
import { createRequire } from 'node:module';
import { join } from 'node:path';
import puppeteer, { type Browser, type Page } from 'puppeteer-core';
import { repoRoot, until } from './lab.js';

/**
 * Headless Chromium from Debian (scripts/install-system-deps.sh) driven by puppeteer-core, for the
 * console's browser test (docs/console.md). Nothing is downloaded but Debian and npm packages.
 */
export const chromiumPath = process.env.FULCRUM_CHROMIUM ?? '/usr/bin/chromium';
export const artifactsDir = join(repoRoot, 'test-output', 'console');
export const viewports = [{ width: 1280, height: 800 }, { width: 390, height: 844 }] as const;

/** Installs Chromium when missing and builds the console when its build is missing or older than its sources. */
export function prepareConsole(): void {
  if (!existsSync(chromiumPath)) execFileSync('bash', [join(repoRoot, 'scripts', 'install-system-deps.sh')], { stdio: 'inherit' });
  const built = join(repoRoot, 'dist', 'console', 'index.html');
  const newest = (dir: string): number => readdirSync(dir, { withFileTypes: true })
    .reduce((m, e) => Math.max(m, e.isDirectory() ? newest(join(dir, e.name)) : statSync(join(dir, e.name)).mtimeMs), 0);
  const src = join(repoRoot, 'console');
  if (!existsSync(built) || statSync(built).mtimeMs < newest(src)) {
    execFileSync('npm', ['run', '--silent', 'build:console'], { cwd: repoRoot, stdio: 'inherit' });
  }
}

export async function launch(): Promise<Browser> {
  return puppeteer.launch({
    executablePath: chromiumPath,
    headless: true,
    // Root in CI: Chromium's sandbox needs an unprivileged user.
    args: ['--no-sandbox', '--disable-dev-shm-usage', '--disable-gpu', '--no-first-run', '--no-default-browser-check'],
    protocolTimeout: 120_000,
  });
}

/** Everything the page logs as an error (including failed requests and policy violations). */
export function watchErrors(page: Page): string[] {
  const errors: string[] = [];
  page.on('console', (m) => { if (m.type() === 'error') errors.push(`${m.text()} ${m.location()?.url ?? ''}`); });
  page.on('pageerror', (e) => errors.push(`page error: ${(e as Error).message ?? e}`));
  return errors;
}

const axeSource = readFileSync(createRequire(import.meta.url).resolve('axe-core/axe.min.js'), 'utf8');

export interface AxeViolation { id: string; impact: string | null; help: string; nodes: number }

/** Runs axe-core in the page (through DevTools evaluation, so the page's own policy stays strict). */
export async function axe(page: Page): Promise<AxeViolation[]> {
  await page.evaluate(axeSource);
  return page.evaluate(async () => {
    const r = await (window as any).axe.run(document, { resultTypes: ['violations'] });
    return r.violations.map((v: any) => ({ id: v.id, impact: v.impact, help: v.help, nodes: v.nodes.length }));
  });
}

/**
 * Saves the page at both widths under test-output/console/ (and into docs/console/ when
 * FULCRUM_CONSOLE_DOCS=1) and returns axe's serious or critical findings at each.
 */
export async function capture(page: Page, name: string): Promise<string[]> {
  mkdirSync(artifactsDir, { recursive: true });
  const bad: string[] = [];
  for (const v of viewports) {
    await page.setViewport(v);
    await page.evaluate(() => window.scrollTo(0, 0));
    await new Promise((r) => setTimeout(r, 300)); // let the layout and charts settle at the new width
    const file = join(artifactsDir, `${name}-${v.width}x${v.height}.png`);
    await page.screenshot({ path: file as `${string}.png` });
    if (process.env.FULCRUM_CONSOLE_DOCS === '1') {
      mkdirSync(join(repoRoot, 'docs', 'console'), { recursive: true });
      copyFileSync(file, join(repoRoot, 'docs', 'console', `${name}-${v.width}x${v.height}.png`));
    }
    for (const x of await axe(page)) {
      if (x.impact === 'serious' || x.impact === 'critical') bad.push(`${name} at ${v.width}px: ${x.id} (${x.impact}): ${x.help} [${x.nodes}]`);
    }
  }
  await page.setViewport(viewports[0]);
  return bad;
}

/** The text of the first element matching `sel`, or '' when there is none. */
export async function textOf(page: Page, sel: string): Promise<string> {
  return page.$eval(sel, (e) => (e as HTMLElement).innerText).catch(() => '');
}

export async function waitText(page: Page, sel: string, test: (t: string) => boolean, what: string, timeoutMs = 60_000): Promise<string> {
  return until(what, async () => {
    const t = await textOf(page, sel);
    return test(t) ? t : undefined;
  }, timeoutMs, 250);
}

/** Types into a field as a person would: select what is there, then type over it. */
export async function fill(page: Page, sel: string, value: string): Promise<void> {
  await page.click(sel, { count: 3 });
  await page.keyboard.press('Backspace');
  if (value) await page.type(sel, value);
}

/** Clicks the first button (or link) whose visible text is exactly `text`. */
export async function clickText(page: Page, text: string, tag = 'button'): Promise<void> {
  const handle = await until(`${tag} "${text}"`, async () => {
    const hs = await page.$$(tag);
    for (const h of hs) {
      const visible = await h.evaluate((e) => (e as HTMLElement).offsetParent !== null || (e as HTMLElement).closest('dialog[open]') !== null);
      if (visible && (await h.evaluate((e) => (e as HTMLElement).innerText.trim())) === text) return h;
    }
    return undefined;
  }, 30_000, 200);
  await handle.click();
}

/** Visible texts of every button and link in the page (for what a read-only token may see). */
export async function controls(page: Page): Promise<string[]> {
  return page.$$eval('button, a, input, select, textarea', (els) => els
    .filter((e) => (e as HTMLElement).offsetParent !== null)
    .map((e) => (e.tagName === 'INPUT' || e.tagName === 'SELECT' || e.tagName === 'TEXTAREA'
      ? `${e.tagName.toLowerCase()}#${e.id || e.getAttribute('aria-label')}` : (e as HTMLElement).innerText.trim())));
}
