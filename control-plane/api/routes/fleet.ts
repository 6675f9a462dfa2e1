import type { Router } from '../router.js';
import type { AuthService } from '../../domain/auth/auth-service.js';
import type { FleetService } from '../../domain/fleet/fleet-service.js';
import { wireTime } from '../../../lib/clock.js';

/**
 * Fleet membership for operators (docs/security/grpc.md), unrestricted users only: a one-time
 * join token for a new data plane or agent, and removing one, which revokes its certificates
 * and closes its streams.
 */
export function fleetRoutes(r: Router, d: { fleet: FleetService; auth: AuthService }): void {
  r.post('/fulcrum/join-tokens', 'account:read_write', async (c) => {
    d.auth.requireUnrestricted(c.actor);
    const t = await d.fleet.createJoinToken(c.body);
    return { token: t.token, role: t.role, id: t.id, region: t.region, expiry: wireTime(t.expires) };
  });
  r.delete('/fulcrum/dataplanes/:id', 'nodebalancers:read_write', async (c) => {
    d.auth.requireUnrestricted(c.actor);
    await d.fleet.revoke('dataplane', c.params.id ?? '');
    return {};
  });
  r.delete('/fulcrum/agents/:id', 'databases:read_write', async (c) => {
    d.auth.requireUnrestricted(c.actor);
    await d.fleet.revoke('agent', c.params.id ?? '');
    return {};
  });
}
