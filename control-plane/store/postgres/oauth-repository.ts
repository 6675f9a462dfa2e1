import type { OAuthRepository } from '../oauth-repository.js';
import { COUNT_USER_TOKENS, DELETE_CLIENT_TOKENS, DELETE_EXPIRED_USER_TOKENS, oauthClientRow, oauthCodeRow } from '../sqlite/oauth-repository.js';
import { pgSql as q, type PgExecutor } from './executor.js';

/**
 * PostgreSQL adapter of the OAuth login's storage. The capped inserts and the use of a code are
 * SERIALIZABLE transactions (PgExecutor): two replicas using one code at once cannot both see
 * it unused.
 */
export function pgOAuth(x: PgExecutor): OAuthRepository {
  return {
    clients: async () => (await x.rows('SELECT * FROM oauth_clients ORDER BY created, id')).map(oauthClientRow),
    async client(id) {
      const r = await x.one('SELECT * FROM oauth_clients WHERE id = $1', [id]);
      return r ? oauthClientRow(r) : undefined;
    },
    addClient: (c, cap) => x.transaction(async () => {
      if (Number((await x.one('SELECT COUNT(*) AS n FROM oauth_clients'))?.n ?? 0) >= cap) return false;
      await x.query('INSERT INTO oauth_clients (id, label, public, redirect_uri, secret_hash, implicit, created) VALUES ($1, $2, $3, $4, $5, $6, $7)',
        [c.id, c.label, c.public ? 1 : 0, c.redirectUri, c.secretHash, c.implicit ? 1 : 0, c.created]);
      return true;
    }),
    async updateClient(id, p) {
      if (p.label !== undefined) await x.query('UPDATE oauth_clients SET label = $1 WHERE id = $2', [p.label, id]);
      if (p.redirectUri !== undefined) await x.query('UPDATE oauth_clients SET redirect_uri = $1 WHERE id = $2', [p.redirectUri, id]);
      if (p.secretHash !== undefined) await x.query('UPDATE oauth_clients SET secret_hash = $1 WHERE id = $2', [p.secretHash, id]);
    },
    deleteClient: (id) => x.transaction(async () => {
      await x.query(q(DELETE_CLIENT_TOKENS), [id]);
      await x.query('DELETE FROM oauth_clients WHERE id = $1', [id]);
    }),
    addCode: (c, now, cap) => x.transaction(async () => {
      await x.query('DELETE FROM oauth_codes WHERE expires <= $1', [now]);
      if (Number((await x.one('SELECT COUNT(*) AS n FROM oauth_codes'))?.n ?? 0) >= cap.total) return false;
      if (Number((await x.one('SELECT COUNT(*) AS n FROM oauth_codes WHERE user_id = $1', [c.userId]))?.n ?? 0) >= cap.perUser) return false;
      await x.query(`INSERT INTO oauth_codes (code_hash, client_id, user_id, redirect_uri, scopes, challenge, expires, token_expiry, used_at, token_id)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, NULL, NULL)`, [c.codeHash, c.clientId, c.userId, c.redirectUri, c.scopes, c.challenge, c.expires, c.tokenExpiry]);
      return true;
    }),
    useCode: (hash, at) => x.transaction(async () => {
      const r = await x.one('SELECT * FROM oauth_codes WHERE code_hash = $1', [hash]);
      if (!r) return undefined;
      await x.query('UPDATE oauth_codes SET used_at = $1 WHERE code_hash = $2 AND used_at IS NULL', [at, hash]);
      return oauthCodeRow(r);
    }),
    linkToken: (hash, clientId, tokenId) => x.transaction(async () => {
      if (hash !== null) await x.query('UPDATE oauth_codes SET token_id = $1 WHERE code_hash = $2', [tokenId, hash]);
      await x.query('INSERT INTO oauth_tokens (token_id, client_id) VALUES ($1, $2)', [tokenId, clientId]);
    }),
    tokenClient: async (tokenId) => (await x.one('SELECT client_id FROM oauth_tokens WHERE token_id = $1', [tokenId]))?.client_id as string | undefined,
    liveTokens: (userId, now) => x.transaction(async () => {
      await x.query(q(DELETE_EXPIRED_USER_TOKENS), [userId, now]);
      return Number((await x.one(q(COUNT_USER_TOKENS), [userId]))?.n ?? 0);
    }),
  };
}
