/**
 * A second MariaDB build for a process-runtime agent, taken from a locally built server image
 * (scripts/build-mysql-image.sh): how the netns fleet (test/helpers/fleet-hosts.ts), whose agents
 * run `mariadbd` processes, gets a newer series to upgrade to on a machine that has one
 * mariadbd installed (docs/multi-host.md, "A second engine build for the process runtime").
 *
 * The image's filesystem is exported (`docker create` + `docker export`, a few seconds) into
 * `<dir>/rootfs`, and `<dir>/rootfs/fulcrum-process/` is laid out as an installation the process
 * runtime knows: `sbin/mariadbd` and `bin/<tool>` (the runtime finds a tool beside the server's
 * folder), `share` and `lib` linked to the image's. Each program is a small wrapper that runs the
 * image's binary through the image's own dynamic loader and libraries (the 11.8 build is linked
 * against a newer glibc than this host's), and points the server at the image's plugins, error
 * messages and character sets instead of the host's. The agent is given it with
 * `--engines FILE` ([{ id, binary }]), as an operator gives any other build.
 */
import { execFile } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, readdirSync, readFileSync, symlinkSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { promisify } from 'node:util';
import { parseServerVersion } from '../../agent/catalogue.js';
import { repoRoot } from './lab.js';

const run = promisify(execFile);

/** The repository the lab's server images are built under (scripts/build-mysql-image.sh). */
export const MYSQL_IMAGE_REPO = process.env.FULCRUM_MYSQL_IMAGE ?? 'fulcrum/mariadb';

/**
 * Starts dockerd when it does not answer, and builds the image of `series` when this host has
 * none yet (a fresh CI machine): `args` are build-mysql-image.sh's (`--suite trixie` for 11.8).
 */
export async function ensureSeriesImage(series: string, args: string[]): Promise<string> {
  const image = `${MYSQL_IMAGE_REPO}:${series}`;
  if (!(await run('docker', ['info'], { timeout: 30_000 }).then(() => true, () => false))) {
    await run('bash', ['scripts/start-dockerd.sh'], { cwd: repoRoot, timeout: 120_000 });
  }
  if (await run('docker', ['image', 'inspect', image], { timeout: 30_000 }).then(() => true, () => false)) return image;
  try {
    await run('bash', ['scripts/build-mysql-image.sh', ...args], { cwd: repoRoot, timeout: 900_000 });
  } catch (e) {
    throw new Error(`scripts/build-mysql-image.sh ${args.join(' ')} failed:\n${(e as { stderr?: string }).stderr ?? (e as Error).message}`);
  }
  return image;
}

export interface ImageEngine {
  /** `mysql/<version>`, the catalogue id the agent offers it under. */
  id: string;
  version: string;
  /** The server wrapper, `<dir>/rootfs/fulcrum-process/sbin/mariadbd`. */
  binary: string;
  /** A catalogue file naming only this build, for `fulcrum agent --engines`. */
  enginesFile: string;
}

/** Exports `image` into `dir` and lays out its MariaDB as a process-runtime build (see above). */
export async function engineFromImage(image: string, dir: string): Promise<ImageEngine> {
  const root = join(dir, 'rootfs');
  mkdirSync(root, { recursive: true });
  const { stdout } = await run('docker', ['create', image, 'true'], { timeout: 60_000 });
  const container = stdout.trim();
  try {
    // Device nodes are neither needed nor creatable everywhere; the export is a plain tar.
    await run('sh', ['-c', 'docker export "$1" | tar -x -C "$2" --exclude=dev -f -', 'sh', container, root], { timeout: 300_000, maxBuffer: 16 << 20 });
  } finally {
    await run('docker', ['rm', '-f', container], { timeout: 60_000 }).catch(() => undefined);
  }
  const base = join(root, 'fulcrum-process');
  for (const d of ['bin', 'sbin']) mkdirSync(join(base, d), { recursive: true });
  symlinkSync(join(root, 'usr', 'share'), join(base, 'share'));
  symlinkSync(join(root, 'usr', 'lib'), join(base, 'lib'));
  const loader = `"${root}/lib64/ld-linux-x86-64.so.2" --library-path "${root}/usr/lib/x86_64-linux-gnu:${root}/lib/x86_64-linux-gnu"`;
  const wrapper = (path: string, body: string) => {
    writeFileSync(path, `#!/bin/sh\n${body}\n`);
    chmodSync(path, 0o755);
  };
  // The server: the image's folders for what it would look for under /usr (the host's 10.11
  // plugins and message files do not fit 11.8), placed after an option-file argument that must come first.
  const serverOpts = `--basedir="${base}" --plugin-dir="${root}/usr/lib/mysql/plugin" --lc-messages-dir="${root}/usr/share/mariadb" --character-sets-dir="${root}/usr/share/mariadb/charsets/"`;
  wrapper(join(base, 'sbin', 'mariadbd'), [
    'case "$1" in',
    `  --no-defaults|--defaults-file=*|--defaults-extra-file=*|--print-defaults) first="$1"; shift; exec ${loader} --argv0 "$0" "${root}/usr/sbin/mariadbd" "$first" ${serverOpts} "$@" ;;`,
    `  *) exec ${loader} --argv0 "$0" "${root}/usr/sbin/mariadbd" ${serverOpts} "$@" ;;`,
    'esac',
  ].join('\n'));
  for (const name of readdirSync(join(root, 'usr', 'bin'))) {
    if (!/^(mariadb|mysql|my_print_defaults|resolveip)/.test(name)) continue;
    const target = join(root, 'usr', 'bin', name);
    let head: Buffer;
    try {
      head = readFileSync(target).subarray(0, 4);
    } catch {
      continue;
    }
    if (head.equals(Buffer.from([0x7f, 0x45, 0x4c, 0x46]))) {
      // argv0 is the wrapper, so that a tool that runs another (mariadb-upgrade runs mariadb
      // and mariadb-check) finds the wrapper beside it.
      wrapper(join(base, 'bin', name), `exec ${loader} --argv0 "$0" "${target}" "$@"`);
    } else if (name === 'mariadb-install-db' || name === 'mysql_install_db') {
      // The script finds the server, my_print_defaults and the system tables under --basedir.
      wrapper(join(base, 'bin', name), `exec sh "${target}" "$@" --basedir="${base}"`);
    }
  }
  const binary = join(base, 'sbin', 'mariadbd');
  const version = parseServerVersion((await run(binary, ['--version'], { timeout: 30_000 })).stdout);
  if (!version) throw new Error(`${image}: could not read the server version of ${binary}`);
  if (!existsSync(join(base, 'bin', 'mariadb-install-db'))) throw new Error(`${image}: no mariadb-install-db in the image`);
  const id = `mysql/${version}`;
  const enginesFile = join(dir, 'engines.json');
  writeFileSync(enginesFile, JSON.stringify([{ id, binary }]));
  return { id, version, binary, enginesFile };
}
