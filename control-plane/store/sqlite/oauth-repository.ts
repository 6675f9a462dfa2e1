import type { Db } from './database.js';
import type { OAuthClientRecord, OAuthCodeRecord, OAuthRepository } from '../oauth-repository.js';
import type { Immediate } from '../store.js';
import { gateOf } from './gate.js';

export const oauthClientRow = (r: any): OAuthClientRecord => ({
  id: r.id, label: r.label, public: Number(r.public) === 1, redirectUri: r.redirect_uri, secretHash: r.secret_hash,
  implicit: Number(r.implicit) === 1, created: Number(r.created),
});
const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
export const oauthCodeRow = (r: any): OAuthCodeRecord => ({
  codeHash: r.code_hash, clientId: r.client_id, userId: Number(r.user_id), redirectUri: r.redirect_uri, scopes: r.scopes,
  challenge: r.challenge ?? null, expires: Number(r.expires), tokenExpiry: num(r.token_expiry), usedAt: num(r.used_at), tokenId: num(r.token_id),
});

/** The SQL both stores run to forget a client's tokens before the client itself (the rest cascades). */
export const DELETE_CLIENT_TOKENS = 'DELETE FROM tokens WHERE id IN (SELECT token_id FROM oauth_tokens WHERE client_id = ?)';
export const DELETE_EXPIRED_USER_TOKENS = 'DELETE FROM tokens WHERE user_id = ? AND expiry IS NOT NULL AND expiry <= ? AND id IN (SELECT token_id FROM oauth_tokens)';
export const COUNT_USER_TOKENS = 'SELECT COUNT(*) AS n FROM oauth_tokens o JOIN tokens t ON t.id = o.token_id WHERE t.user_id = ?';

export function sqliteOAuth(db: Db): OAuthRepository {
  return gateOf(db).wrap<OAuthRepository>(immediateOAuth(db));
}

function immediateOAuth(db: Db): Immediate<OAuthRepository> {
  return {
    clients: () => db.prepare('SELECT * FROM oauth_clients ORDER BY created, id').all().map(oauthClientRow),
    client(id) {
      const r = db.prepare('SELECT * FROM oauth_clients WHERE id = ?').get(id);
      return r ? oauthClientRow(r) : undefined;
    },
    addClient(c, cap) {
      return db.transaction(() => {
        if ((db.prepare('SELECT COUNT(*) FROM oauth_clients').pluck().get() as number) >= cap) return false;
        db.prepare('INSERT INTO oauth_clients (id, label, public, redirect_uri, secret_hash, implicit, created) VALUES (?, ?, ?, ?, ?, ?, ?)')
          .run(c.id, c.label, c.public ? 1 : 0, c.redirectUri, c.secretHash, c.implicit ? 1 : 0, c.created);
        return true;
      }).immediate();
    },
    updateClient(id, p) {
      if (p.label !== undefined) db.prepare('UPDATE oauth_clients SET label = ? WHERE id = ?').run(p.label, id);
      if (p.redirectUri !== undefined) db.prepare('UPDATE oauth_clients SET redirect_uri = ? WHERE id = ?').run(p.redirectUri, id);
      if (p.secretHash !== undefined) db.prepare('UPDATE oauth_clients SET secret_hash = ? WHERE id = ?').run(p.secretHash, id);
    },
    deleteClient(id) {
      db.transaction(() => {
        db.prepare(DELETE_CLIENT_TOKENS).run(id);
        db.prepare('DELETE FROM oauth_clients WHERE id = ?').run(id);
      }).immediate();
    },
    addCode(c, now, cap) {
      return db.transaction(() => {
        db.prepare('DELETE FROM oauth_codes WHERE expires <= ?').run(now);
        if ((db.prepare('SELECT COUNT(*) FROM oauth_codes').pluck().get() as number) >= cap.total) return false;
        if ((db.prepare('SELECT COUNT(*) FROM oauth_codes WHERE user_id = ?').pluck().get(c.userId) as number) >= cap.perUser) return false;
        db.prepare(`INSERT INTO oauth_codes (code_hash, client_id, user_id, redirect_uri, scopes, challenge, expires, token_expiry, used_at, token_id)
          VALUES (?, ?, ?, ?, ?, ?, ?, ?, NULL, NULL)`).run(c.codeHash, c.clientId, c.userId, c.redirectUri, c.scopes, c.challenge, c.expires, c.tokenExpiry);
        return true;
      }).immediate();
    },
    useCode(hash, at) {
      return db.transaction(() => {
        const r = db.prepare('SELECT * FROM oauth_codes WHERE code_hash = ?').get(hash);
        if (!r) return undefined;
        db.prepare('UPDATE oauth_codes SET used_at = ? WHERE code_hash = ? AND used_at IS NULL').run(at, hash);
        return oauthCodeRow(r);
      }).immediate();
    },
    linkToken(hash, clientId, tokenId) {
      db.transaction(() => {
        if (hash !== null) db.prepare('UPDATE oauth_codes SET token_id = ? WHERE code_hash = ?').run(tokenId, hash);
        db.prepare('INSERT INTO oauth_tokens (token_id, client_id) VALUES (?, ?)').run(tokenId, clientId);
      }).immediate();
    },
    tokenClient: (tokenId) => db.prepare('SELECT client_id FROM oauth_tokens WHERE token_id = ?').pluck().get(tokenId) as string | undefined,
    liveTokens(userId, now) {
      return db.transaction(() => {
        db.prepare(DELETE_EXPIRED_USER_TOKENS).run(userId, now);
        return Number((db.prepare(COUNT_USER_TOKENS).get(userId) as { n: number }).n);
      }).immediate();
    },
  };
}
