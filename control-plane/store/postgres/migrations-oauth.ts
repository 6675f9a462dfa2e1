import type { Migration } from '../sqlite/migrations.js';

/** The OAuth 2 login's tables, as in SQLite (store/sqlite/migrations-oauth.ts), with linode-cli's client. */
export const postgresOAuthMigrations: Migration[] = [
  {
    id: '300-oauth',
    sql: `
      CREATE TABLE oauth_clients (
        id TEXT PRIMARY KEY,
        label TEXT NOT NULL,
        public BIGINT NOT NULL,
        redirect_uri TEXT NOT NULL,
        secret_hash TEXT NOT NULL,
        implicit BIGINT NOT NULL DEFAULT 0,
        created BIGINT NOT NULL
      );
      CREATE TABLE oauth_codes (
        code_hash TEXT PRIMARY KEY,
        client_id TEXT NOT NULL REFERENCES oauth_clients(id) ON DELETE CASCADE,
        user_id BIGINT NOT NULL REFERENCES users(id) ON DELETE CASCADE,
        redirect_uri TEXT NOT NULL,
        scopes TEXT NOT NULL,
        challenge TEXT,
        expires BIGINT NOT NULL,
        token_expiry BIGINT,
        used_at BIGINT,
        token_id BIGINT
      );
      CREATE INDEX oauth_codes_expires ON oauth_codes(expires);
      CREATE TABLE oauth_tokens (
        token_id BIGINT PRIMARY KEY REFERENCES tokens(id) ON DELETE CASCADE,
        client_id TEXT NOT NULL REFERENCES oauth_clients(id) ON DELETE CASCADE
      );
      INSERT INTO oauth_clients (id, label, public, redirect_uri, secret_hash, implicit, created)
        VALUES ('5823b4627e45411d18e9', 'linode-cli', 1, 'http://localhost', '', 1, 0);
    `,
  },
];
