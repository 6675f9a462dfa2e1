/**
 * The OAuth login's rows as both adapters read them, their mappers, and the SQL both run
 * (rows.ts says how rows come back from each dialect).
 */

import type { OAuthClientRecord, OAuthCodeRecord } from '../../domain/auth/oauth-repository.js';

/** A 0/1 integer column. */
type Flag = number;

export interface OAuthClientRow {
  id: string; label: string; public: Flag; redirect_uri: string; secret_hash: string; implicit: Flag; created: number;
}
export const oauthClientRow = (r: OAuthClientRow): OAuthClientRecord => ({
  id: r.id, label: r.label, public: Number(r.public) === 1, redirectUri: r.redirect_uri, secretHash: r.secret_hash,
  implicit: Number(r.implicit) === 1, created: Number(r.created),
});

export interface OAuthCodeRow {
  code_hash: string; client_id: string; user_id: number; redirect_uri: string; scopes: string; challenge: string | null;
  expires: number; token_expiry: number | null; used_at: number | null; token_id: number | null;
}
const num = (v: unknown) => (v === null || v === undefined ? null : Number(v));
export const oauthCodeRow = (r: OAuthCodeRow): OAuthCodeRecord => ({
  codeHash: r.code_hash, clientId: r.client_id, userId: Number(r.user_id), redirectUri: r.redirect_uri, scopes: r.scopes,
  challenge: r.challenge ?? null, expires: Number(r.expires), tokenExpiry: num(r.token_expiry), usedAt: num(r.used_at), tokenId: num(r.token_id),
});

/** The SQL both stores run to forget a client's tokens before the client itself (the rest cascades). */
export const DELETE_CLIENT_TOKENS = 'DELETE FROM tokens WHERE id IN (SELECT token_id FROM oauth_tokens WHERE client_id = ?)';
export const DELETE_EXPIRED_USER_TOKENS = 'DELETE FROM tokens WHERE user_id = ? AND expiry IS NOT NULL AND expiry <= ? AND id IN (SELECT token_id FROM oauth_tokens)';
export const COUNT_USER_TOKENS = 'SELECT COUNT(*) AS n FROM oauth_tokens o JOIN tokens t ON t.id = o.token_id WHERE t.user_id = ?';
