/** Stored shapes of account users, their grants and API tokens (domain side, not the wire format). */

export interface Grants {
  global: Record<string, boolean>; // add_nodebalancers, add_databases, ...
  nodebalancer: Record<string, 'read_only' | 'read_write'>;
  database: Record<string, 'read_only' | 'read_write'>;
}

export interface User {
  id: number;
  username: string;
  email: string;
  restricted: boolean;
  /** The profile's timezone (an IANA name); 'UTC' until the user sets one. */
  timezone: string;
  grants: Grants;
}

export interface TokenRecord {
  id: number;
  userId: number;
  label: string;
  scopes: string;
  tokenPrefix: string;
  created: number;
  expiry: number | null;
}
