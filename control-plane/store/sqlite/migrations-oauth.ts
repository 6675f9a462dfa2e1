import type { Migration } from './migrations.js';

/**
 * The OAuth 2 login (docs/security/api.md, "OAuth login"), in the account range. The install
 * ships linode-cli's public client (its id is fixed in linode-cli) as the one client allowed the
 * implicit grant; an admin may delete it.
 */
export const oauthMigrations: Migration[] = [
  {
    id: '300-oauth',
    sql: `
      CREATE TABLE oauth_clients (
        id TEXT PRIMARY KEY,
        label TEXT NOT NULL,
        public INTEGER NOT NULL,
        redirect_uri TEXT NOT NULL,
        secret_hash TEXT NOT NULL,
        implicit INTEGER NOT NULL DEFAULT 0,
        created INTEGER NOT NULL
      );
      CREATE TABLE oauth_codes (
        code_hash TEXT PRIMARY KEY,
        client_id TEXT NOT NULL REFERENCES oauth_clients(id) ON DELETE CASCADE,
        user_id INTEGER NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        redirect_uri TEXT NOT NULL,
        scopes TEXT NOT NULL,
        challenge TEXT,
        expires INTEGER NOT NULL,
        token_expiry INTEGER,
        used_at INTEGER,
        token_id INTEGER
      );
      CREATE INDEX oauth_codes_expires ON oauth_codes(expires);
      CREATE TABLE oauth_tokens (
        token_id INTEGER PRIMARY KEY REFERENCES tokens(id) ON DELETE CASCADE,
        client_id TEXT NOT NULL REFERENCES oauth_clients(id) ON DELETE CASCADE
      );
      INSERT INTO oauth_clients (id, label, public, redirect_uri, secret_hash, implicit, created)
        VALUES ('5823b4627e45411d18e9', 'linode-cli', 1, 'http://localhost', '', 1, 0);
    `,
  },
];
