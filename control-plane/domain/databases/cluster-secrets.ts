import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { openssl } from '../../../lib/pki.js';
import type { ClusterSecrets } from './model.js';

/**
 * The secrets every member agent of a cluster spread over agents shares (docs/databases.md,
 * "Clusters across hosts"): a per-database CA (P-256, ten years) with which each agent issues its
 * own members' server certificate and against which replicas verify their primary, and the
 * replication account's password. Made once, when the members are placed.
 */
export function makeClusterSecrets(databaseId: number): ClusterSecrets {
  const { privateKey } = generateKeyPairSync('ec', { namedCurve: 'prime256v1' });
  const caKeyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const caCertPem = openssl([
    'req', '-x509', '-new', '-key', '/dev/stdin', '-days', '3650', '-subj', `/CN=Fulcrum database ${databaseId} CA`,
    '-addext', 'basicConstraints=critical,CA:TRUE', '-addext', 'keyUsage=critical,keyCertSign,cRLSign',
  ], {}, caKeyPem);
  return { caCertPem, caKeyPem, replPassword: randomBytes(18).toString('base64url') };
}
