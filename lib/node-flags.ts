/**
 * V8 flags a data plane process (primary and workers) runs with. Node 24's V8 sizes the young
 * generation from the heap limit, up to 64 MB per semi-space where Node 20 stopped at 16 MB; each
 * data plane process holds a whole engine (every NodeBalancer's runtime), so at 10,000
 * NodeBalancers the primary and two workers came to 1,176 MB against 976 MB on Node 20
 * (docs/performance.md, "Data plane memory on Node 24"). 16 MB gives that back at no cost the
 * propagation bench could see. V8 reads the flag only at start (v8.setFlagsFromString later
 * changes nothing), so the primary gets it on its command line (the systemd unit, the container
 * image's docker/entrypoint.sh, the lab, the benches) and passes it to its workers.
 */
export const DATAPLANE_NODE_FLAGS: readonly string[] = ['--max-semi-space-size=16'];

/** `execArgv` with the data plane's flags added, unless the operator set the same flag. */
export function withDataplaneHeapFlags(execArgv: readonly string[]): string[] {
  return execArgv.some((a) => a.startsWith('--max-semi-space-size')) ? [...execArgv] : [...execArgv, ...DATAPLANE_NODE_FLAGS];
}
