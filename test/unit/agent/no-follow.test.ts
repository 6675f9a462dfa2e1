/**
 * agent/runtime/no-follow.ts: what the agent (root) does in folders a node's uid can write never
 * goes through a link planted there. Each case plants links (and a hard link) to victims outside
 * and checks the victims are untouched. The end-to-end attack is test/security/node-uid-tools.test.ts.
 */
import { chmodSync, existsSync, linkSync, lstatSync, mkdirSync, mkdtempSync, readFileSync, readdirSync, rmSync, statSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { afterEach, beforeEach, describe, expect, it } from 'vitest';
import { chownTree, copyTree, ensureDir, moveEntries, openOwnedFile, removeTree, writeFileNoFollow } from '../../../agent/runtime/no-follow.js';

const root = process.getuid?.() === 0;
// Another owner when we can give files away (the agent is root), else ourselves.
const node = root ? { uid: 1_500_000_999, gid: 4242 } : { uid: process.getuid?.() ?? 0, gid: process.getgid?.() ?? 0 };

describe('no-follow file operations', () => {
  let tmp: string;
  let victimFile: string;
  let victimDir: string;
  let nodeDir: string;

  beforeEach(() => {
    tmp = mkdtempSync(join(tmpdir(), 'fulcrum-nofollow-'));
    victimFile = join(tmp, 'victim-file');
    victimDir = join(tmp, 'victim-dir');
    writeFileSync(victimFile, 'VICTIM\n', { mode: 0o640 });
    mkdirSync(victimDir, { mode: 0o751 });
    chmodSync(victimDir, 0o751);
    writeFileSync(join(victimDir, 'inside'), 'INSIDE\n');
    nodeDir = join(tmp, 'node');
    mkdirSync(nodeDir);
  });
  afterEach(() => rmSync(tmp, { recursive: true, force: true }));

  const victimsUnchanged = () => {
    expect(readFileSync(victimFile, 'utf8')).toBe('VICTIM\n');
    expect(statSync(victimFile).mode & 0o7777).toBe(0o640);
    expect(statSync(victimFile).uid).toBe(process.getuid?.());
    expect(statSync(victimDir).mode & 0o7777).toBe(0o751);
    expect(statSync(victimDir).uid).toBe(process.getuid?.());
    expect(readdirSync(victimDir)).toEqual(['inside']);
    expect(statSync(join(victimDir, 'inside')).uid).toBe(process.getuid?.());
  };

  it('writeFileNoFollow replaces a link with the new file, owned and moded as asked', async () => {
    symlinkSync(victimFile, join(nodeDir, 'key.pem'));
    await writeFileNoFollow(join(nodeDir, 'key.pem'), 'KEY\n', { mode: 0o600, owner: node });
    victimsUnchanged();
    const st = lstatSync(join(nodeDir, 'key.pem'));
    expect(st.isFile()).toBe(true);
    expect([st.uid, st.gid, st.mode & 0o7777]).toEqual([node.uid, node.gid, 0o600]);
    expect(readFileSync(join(nodeDir, 'key.pem'), 'utf8')).toBe('KEY\n');
    expect(readdirSync(nodeDir)).toEqual(['key.pem']);
  });

  it('ensureDir replaces a link to a folder (or a file) with a real folder', async () => {
    symlinkSync(victimDir, join(nodeDir, 'tmp'));
    symlinkSync(victimFile, join(nodeDir, 'no-files'));
    await ensureDir(join(nodeDir, 'tmp'), { mode: 0o700, owner: node });
    await ensureDir(join(nodeDir, 'no-files'), { mode: 0o500 });
    victimsUnchanged();
    expect(lstatSync(join(nodeDir, 'tmp')).isDirectory()).toBe(true);
    expect(statSync(join(nodeDir, 'tmp')).uid).toBe(node.uid);
    expect(statSync(join(nodeDir, 'no-files')).mode & 0o7777).toBe(0o500);
  });

  it('chownTree gives the tree away but neither what its links point to nor a hard-linked file', async () => {
    mkdirSync(join(nodeDir, 'mysql'));
    writeFileSync(join(nodeDir, 'mysql', 'user.MAD'), 'x');
    symlinkSync(victimFile, join(nodeDir, 'mysql', 'link'));
    symlinkSync(victimDir, join(nodeDir, 'dirlink'));
    linkSync(victimFile, join(nodeDir, 'hard'));
    await chownTree(nodeDir, node);
    victimsUnchanged();
    expect(statSync(join(nodeDir, 'mysql', 'user.MAD')).uid).toBe(node.uid);
    expect(statSync(join(nodeDir, 'mysql')).uid).toBe(node.uid);
    expect(statSync(nodeDir).uid).toBe(node.uid);
    expect(lstatSync(join(nodeDir, 'dirlink')).uid).toBe(node.uid);
  });

  it('removeTree removes links, not what they point to', async () => {
    mkdirSync(join(nodeDir, 'a', 'b'), { recursive: true });
    symlinkSync(victimDir, join(nodeDir, 'a', 'b', 'dir'));
    symlinkSync(victimFile, join(nodeDir, 'a', 'file'));
    await removeTree(join(nodeDir, 'a'));
    await removeTree(join(nodeDir, 'missing'));
    victimsUnchanged();
    expect(existsSync(join(nodeDir, 'a'))).toBe(false);
    // A link as the tree itself: the link goes, its folder stays.
    symlinkSync(victimDir, join(nodeDir, 'spool'));
    await removeTree(join(nodeDir, 'spool'));
    victimsUnchanged();
  });

  it("copyTree and moveEntries take only folders and the node's own files; openOwnedFile refuses a link", async () => {
    const me = process.getuid?.() ?? 0;
    const src = join(nodeDir, 'work');
    const dest = join(tmp, 'data');
    mkdirSync(join(src, 'db'), { recursive: true });
    mkdirSync(dest);
    writeFileSync(join(src, 'db', 't.ibd'), 'PAGES');
    await copyTree(src, dest, me);
    expect(readFileSync(join(dest, 'db', 't.ibd'), 'utf8')).toBe('PAGES');
    symlinkSync(victimFile, join(src, 'db', 'stolen'));
    mkdirSync(join(tmp, 'data2'));
    await expect(copyTree(src, join(tmp, 'data2'), me)).rejects.toThrow(/only folders and files/);
    rmSync(join(src, 'db', 'stolen'));
    if (root) {
      // A file that is not the node's (a hard link to a host file would be one) is refused.
      mkdirSync(join(tmp, 'data3'));
      await expect(copyTree(src, join(tmp, 'data3'), node.uid)).rejects.toThrow(/not a file the node wrote/);
      await expect(moveEntries(src, join(tmp, 'data3'), node.uid)).rejects.toThrow(/not the node's/);
    }
    await moveEntries(src, dest, me);
    expect(readdirSync(src)).toEqual([]);
    expect(readFileSync(join(dest, 'db', 't.ibd'), 'utf8')).toBe('PAGES');
    symlinkSync(victimFile, join(nodeDir, 'binlog.000001'));
    await expect(openOwnedFile(join(nodeDir, 'binlog.000001'), me)).rejects.toThrow(/ELOOP/);
    victimsUnchanged();
  });
});
