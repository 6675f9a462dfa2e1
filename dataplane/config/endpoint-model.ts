/**
 * The data plane's validated view of a snapshot's database endpoints (docs/databases.md,
 * "Database endpoints"): where each listens, whom it admits, which members it leads to.
 */
export interface EndpointTargetSpec {
  readonly host: string;
  readonly port: number;
}

export interface DbEndpointSpec {
  readonly databaseId: number;
  readonly role: 'primary' | 'secondary';
  readonly address: string;
  readonly port: number;
  readonly allowList: readonly string[];
  readonly requireTls: boolean;
  /** Empty while the primary is unknown: every client is refused. */
  readonly targets: readonly EndpointTargetSpec[];
  /** `address:port`, shared key space with the NodeBalancer listeners. */
  readonly listenKey: string;
}
