/**
 * The OAuth 2 login's storage (docs/security/api.md, "OAuth login"): the clients an admin
 * registers, the authorization codes the login page hands out, and which API token each client
 * was issued. Secrets and codes are kept only as SHA-256 hashes.
 */

export interface OAuthClientRecord {
  /** 20 hex characters, as the real service's client ids. */
  id: string;
  label: string;
  /** A public client (a browser app, a CLI) has no secret and must use PKCE S256. */
  public: boolean;
  /** The one redirect URI (no query, no fragment), compared exactly (OAuthService). */
  redirectUri: string;
  /** SHA-256 of the secret; '' for a public client. */
  secretHash: string;
  /** Whether the implicit grant is allowed (only the linode-cli client the install ships). */
  implicit: boolean;
  created: number;
}

export interface OAuthCodeRecord {
  /** SHA-256 of the code. */
  codeHash: string;
  clientId: string;
  userId: number;
  /** The redirect URI as the authorization request gave it (query included). */
  redirectUri: string;
  scopes: string;
  /** The PKCE S256 challenge, or null when a confidential client sent none. */
  challenge: string | null;
  expires: number;
  /** Latest expiry of the token it is exchanged for (the signing-in token's own expiry), or null. */
  tokenExpiry: number | null;
  usedAt: number | null;
  /** The token the code was exchanged for, once it was. */
  tokenId: number | null;
}

export interface OAuthRepository {
  clients(): Promise<OAuthClientRecord[]>;
  client(id: string): Promise<OAuthClientRecord | undefined>;
  /** Adds the client unless `cap` clients exist already; false when refused. */
  addClient(c: OAuthClientRecord, cap: number): Promise<boolean>;
  updateClient(id: string, patch: Partial<Pick<OAuthClientRecord, 'label' | 'redirectUri' | 'secretHash'>>): Promise<void>;
  /** Deletes the client, its codes and every token it was issued, in one transaction. */
  deleteClient(id: string): Promise<void>;
  /**
   * Deletes the codes that expired by `now`, then stores `c` unless `cap.total` codes are still
   * pending, or `cap.perUser` of the same user; false when refused.
   */
  addCode(c: OAuthCodeRecord, now: number, cap: { total: number; perUser: number }): Promise<boolean>;
  /**
   * Marks the code used at `at` if it was not yet. Returns the record as it was before (so
   * `usedAt` is null only for the one caller that used it), undefined when there is no such code.
   */
  useCode(codeHash: string, at: number): Promise<OAuthCodeRecord | undefined>;
  /** Records the token a code was exchanged for and which client it was issued to. */
  linkToken(codeHash: string | null, clientId: string, tokenId: number): Promise<void>;
  /** The client a token was issued to through the login, if any. */
  tokenClient(tokenId: number): Promise<string | undefined>;
  /**
   * Deletes the user's login-issued tokens that expired by `now`, then says how many are live.
   */
  liveTokens(userId: number, now: number): Promise<number>;
}
