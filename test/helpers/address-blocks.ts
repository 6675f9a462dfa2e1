import { createServer, type Server } from 'node:net';

/** A third octet held for one lab's 127.x.<octet>.0/24 blocks; `release` gives it back. */
export interface OctetClaim {
  octet: number;
  release(): Promise<void>;
}

/**
 * A third octet (from..to) for a test's own 127.73-79.<octet>.0/24 blocks (endpoint pool, node
 * pool, endpoint source, client addresses), held host-wide until released or until the process
 * ends. A random draw is not enough: two labs with one octet both hand out 127.78.<octet>.1 as a
 * database endpoint, the second data plane cannot bind it, and that database's clients reach the
 * other lab's server, whose certificate chains to another CA ("self-signed certificate in
 * certificate chain"). Labs meet that way beside each other in the two e2e lanes (a serial file
 * runs beside the concurrent ones) and between test runs of different checkouts on one host.
 *
 * The claim is a listening socket in Linux's abstract namespace (`\0fulcrum-test-octet-<n>`): at
 * most one process can hold the name, and the kernel drops it with the process that held it, so a
 * killed test leaves no stale claim behind. Sockets of the root network namespace, where test
 * processes run.
 */
export async function claimOctet(from = 100, to = 249): Promise<OctetClaim> {
  const width = to - from + 1;
  const first = Math.floor(Math.random() * width);
  for (let i = 0; i < width; i++) {
    const octet = from + ((first + i) % width);
    const server = await hold(`\0fulcrum-test-octet-${octet}`);
    if (!server) continue;
    // The claim alone never keeps a test process running.
    server.unref();
    return { octet, release: () => new Promise<void>((resolve) => server.close(() => resolve())) };
  }
  throw new Error(`every address block 127.x.${from}-${to} is held by another test on this host`);
}

/**
 * The server listening on `name` (an abstract socket name, `\0...`), or undefined when another
 * process holds it. Whatever else a test must own host-wide (a netns prefix, helpers/hosts.ts) is
 * held the same way.
 */
export function hold(name: string): Promise<Server | undefined> {
  return new Promise((resolve, reject) => {
    const server = createServer();
    server.once('error', (err: NodeJS.ErrnoException) => (err.code === 'EADDRINUSE' ? resolve(undefined) : reject(err)));
    server.listen(name, () => resolve(server));
  });
}
