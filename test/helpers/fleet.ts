import type { ControlPlane } from '../../control-plane/main.js';
import { mtlsCredentials, type grpc } from '../../lib/grpc.js';
import { isControlPlaneCert, parseJoinToken } from '../../lib/fleet-host.js';
import { generateKeyAndCsr, saveHostPki, type HostPki } from '../../lib/pki.js';

type Role = 'dataplane' | 'agent';

/**
 * A certificate from a test control plane's fleet CA for one host, made the way a join makes it
 * (a join token redeemed with a CSR) but in process, so tests need no bootstrap round trip.
 */
export async function issueHostPki(cp: ControlPlane, role: Role, id: string, region = '*'): Promise<HostPki> {
  const t = parseJoinToken((await cp.context.fleet.createJoinToken({ role, id, region })).token);
  const { keyPem, csrPem } = generateKeyAndCsr();
  const { certPem } = await cp.context.fleet.join(`${t.id}.${t.secret}`, role, csrPem);
  return { caPem: cp.context.fleet.caPem, certPem, keyPem, bootstrapPort: t.port };
}

/** gRPC channel credentials of a freshly enrolled host (for hand-written test clients). */
export async function hostCredentials(cp: ControlPlane, role: Role, id: string, region = '*'): Promise<grpc.ChannelCredentials> {
  return mtlsCredentials(await issueHostPki(cp, role, id, region), isControlPlaneCert);
}

/** Puts a host's certificate into its state folder, as `--join` would, before it starts. */
export async function enrolHost(cp: ControlPlane, stateDir: string, role: Role, id: string, region = '*'): Promise<void> {
  saveHostPki(stateDir, await issueHostPki(cp, role, id, region));
}
