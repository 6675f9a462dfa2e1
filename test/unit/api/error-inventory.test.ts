import { readFileSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import ts from 'typescript';
import { describe, expect, it } from 'vitest';
import { apiReasons, statusByCode } from '../../../control-plane/api/errors.js';
import { databaseReasons } from '../../../control-plane/domain/databases/validation.js';
import { engineConfigReasons } from '../../../control-plane/domain/databases/engine-config.js';
import { nodeBalancerReasons } from '../../../control-plane/domain/nodebalancers/validation.js';
import { fleetReasons } from '../../../control-plane/domain/fleet/validation.js';
import { repoRoot } from '../../helpers/lab.js';

/**
 * The inventory of what the API answers when it refuses a request: every error code with its HTTP
 * status, and every reason text. Clients (linodego, the CLI, Terraform) and the integration tests
 * match on these texts byte for byte, so a changed or new one must show up here on purpose: edit
 * the text in its table (or at its error site) and the list below together.
 */

type Table = Record<string, string | ((...args: any[]) => string)>;

/** Each text of a table, parameters shown as {0}, {1}, ... */
function render(table: Table): Record<string, string> {
  return Object.fromEntries(
    Object.entries(table).map(([k, v]) => [k, typeof v === 'string' ? v : v(...Array.from({ length: v.length }, (_, i) => `{${i}}`))]),
  );
}

function productFiles(dir: string): string[] {
  return readdirSync(dir, { withFileTypes: true }).flatMap((e) => {
    const p = join(dir, e.name);
    if (e.isDirectory()) return productFiles(p);
    return e.name.endsWith('.ts') ? [p] : [];
  });
}

/** The literal texts of an expression: both branches of a conditional, `${...}` kept as written. */
function literals(e: ts.Expression | undefined): string[] {
  if (!e) return [];
  if (ts.isParenthesizedExpression(e)) return literals(e.expression);
  if (ts.isConditionalExpression(e)) return [...literals(e.whenTrue), ...literals(e.whenFalse)];
  if (ts.isStringLiteral(e) || ts.isNoSubstitutionTemplateLiteral(e)) return [e.text];
  if (ts.isTemplateExpression(e)) return [e.getText().slice(1, -1)];
  return [];
}

/**
 * Reason texts written where an error is raised rather than taken from a table: the reason of a
 * `new FulcrumError`, of `FulcrumError.field/conflict`, of an `errs.add`, a `reason:` property,
 * a `*REASON*` constant, and the literals returned by a function typed `string | undefined` (the
 * shape of a rule that returns its violation).
 */
function errorSiteTexts(file: string): string[] {
  const src = ts.createSourceFile(file, readFileSync(file, 'utf8'), ts.ScriptTarget.ES2022, true);
  const out: string[] = [];
  const visit = (n: ts.Node, reasonFn: boolean): void => {
    if (ts.isNewExpression(n) && n.expression.getText() === 'FulcrumError') out.push(...literals(n.arguments?.[1]));
    if (ts.isCallExpression(n) && ts.isPropertyAccessExpression(n.expression)) {
      const callee = n.expression.getText();
      if (callee === 'FulcrumError.field' || n.expression.name.text === 'add') {
        if (n.arguments.length === 2) out.push(...literals(n.arguments[1]));
      }
      if (callee === 'FulcrumError.conflict') out.push(...literals(n.arguments[0]));
    }
    if (ts.isPropertyAssignment(n) && n.name.getText() === 'reason') out.push(...literals(n.initializer));
    if (ts.isVariableDeclaration(n) && /REASON/i.test(n.name.getText())) out.push(...literals(n.initializer));
    if (reasonFn && ts.isReturnStatement(n)) out.push(...literals(n.expression));
    let inner = reasonFn;
    if (ts.isFunctionLike(n)) inner = n.type?.getText() === 'string | undefined';
    ts.forEachChild(n, (c) => visit(c, inner));
  };
  visit(src, false);
  return out;
}

describe('API error inventory', () => {
  it('maps every error code to one HTTP status', () => {
    expect(statusByCode).toEqual({
      invalid_token: 401,
      scope_missing: 401,
      forbidden: 403,
      not_found: 404,
      validation: 400,
      conflict: 400,
      rate_limited: 429,
      unavailable: 400,
      invalid_config: 400,
      internal: 500,
    });
  });

  it('lists the texts of the HTTP layer (control-plane/api/errors.ts)', () => {
    expect(render(apiReasons)).toEqual({
      headersTooLarge: 'The request headers are too large',
      requestMalformed: 'The request is malformed',
      requestTimeout: 'The request took too long to arrive',
      urlMalformed: 'The request URL is malformed',
      badRequest: 'Bad request',
      bodyNotJson: 'The request body is not valid JSON',
      bodyNotObject: 'The request body must be a JSON object',
      bodyTooLarge: 'The request body is too large',
      scopeMissing: 'Your OAuth token is not authorized to use this endpoint.',
      rateLimited: 'Too many requests',
      internal: 'Internal server error',
      positiveInteger: '{0} must be a positive integer',
      pageMin: 'page must be 1 or greater',
      pageSize: 'page_size must be between 25 and 500',
      filterTooLong: 'Filter is too long',
      filterNotJson: 'Filter is not valid JSON',
      filterNotObject: 'Filter must be a JSON object',
      filterTooDeep: 'Filter is nested too deeply',
      filterField: 'Cannot filter on {0}',
      filterValue: 'Invalid value for {0}',
      filterOperator: 'Unknown operator {0}',
      filterScalar: '{0} needs a scalar value',
      filterComparable: '{0} needs a number or a string',
      filterContains: '+contains needs a string',
      filterFieldOr: '+or on a field needs an array of values',
      filterList: '{0} needs a non-empty array',
      filterOrderBy: '+order_by must be a string',
      filterOrder: '+order must be asc or desc',
    });
  });

  it('lists the NodeBalancer validation texts (control-plane/domain/nodebalancers/reasons.ts)', () => {
    expect(render(nodeBalancerReasons)).toEqual({
      integer: '{0} must be an integer',
      between: '{0} must be between {1} and {2}',
      oneOf: '{0} must be one of {1}',
      string: '{0} must be a string',
      tooLong: '{0} must be {1} characters or fewer',
      regionRequired: 'Region is required.',
      regionInvalid: 'region is not valid',
      nbLabelType: 'Label must be a string',
      nbLabelLength: 'Label must be between 3 and 32 characters.',
      nbLabelChars: "Label can't contain special characters or spaces.",
      nbLabelUnique: 'Label must be unique among your NodeBalancers',
      tagsArray: 'tags must be an array of strings',
      tag: 'Tags must be strings of 3 to 50 characters',
      firewalls: 'Firewalls are not supported by this server',
      configsArray: 'configs must be an array',
      configsMax: 'A NodeBalancer may have at most 50 configs',
      configObject: 'config must be an object',
      portUnique: 'Port must be unique.',
      checkPathChars: 'check_path may only contain letters, digits and / - % ? & = .',
      checkBodyRegex: 'check_body must be a valid regular expression',
      checkBodyNested: 'check_body must not repeat a group that repeats inside, such as (a+)+ (matching it can take exponential time)',
      checkBodyAlternation: 'check_body must not repeat an alternation, such as (a|ab)* (matching it can take exponential time); use a character class',
      checkBodyBackref: 'check_body must not use backreferences',
      checkPassive: 'check_passive must be a boolean',
      pem: '{0} must be a PEM string',
      pemTooLong: '{0} is too long',
      intervalOverTimeout: 'check_interval must be greater than check_timeout',
      httpPathRequired: 'An HTTP path is required.',
      httpBodyRequired: 'An HTTP body regex is required.',
      proxyNeedsTcp: 'proxy_protocol v1 and v2 require protocol tcp',
      cookieNeedsHttp: 'http_cookie stickiness requires protocol http or https',
      certRequired: 'SSL certificate is required when using HTTPS.',
      keyRequired: 'SSL key is required when using HTTPS.',
      certInvalid: 'Invalid SSL certificate: it must be a PEM encoded certificate',
      keyInvalid: 'Invalid SSL key: it must be a PEM encoded private key',
      keyMismatch: 'SSL key does not match the certificate',
      httpsOnly: '{0} is only allowed with protocol https',
      nodesRequired: 'You must provide at least one back end node.',
      nodesArray: 'nodes must be an array',
      nodesMax: 'A config may have at most 255 nodes',
      rebuildNodes: 'nodes is required and must be an array',
      nodeNotInConfig: 'Node not found in this config',
      nodeTwice: 'Node listed twice',
      nodeObject: 'node must be an object',
      labelRequired: 'label is required',
      labelString: 'label must be a string',
      nodeLabelLength: 'Label should be between 3 and 32 characters.',
      nodeLabelChars: 'Label may only contain letters, numbers, periods, dashes, and underscores.',
      addressRequired: 'address is required',
      addressType: 'address must be a string of the form ip:port',
      addressFormat: 'Must be a valid IPv4 address followed by :port',
      addressPort: 'Port must be between 1 and 65535.',
      addressNotAllowed: 'This address is not allowed for a backend node on this server',
      vpcs: 'VPCs are not supported by this server',
      typeMax: 'A {0} NodeBalancer may have at most {1} nodes per config',
      udpOnly: '{0} {1} is only allowed with protocol udp',
      notUdp: '{0} {1} is not allowed with protocol udp',
      udpProxyProtocol: 'proxy_protocol must be none with protocol udp',
      udpCheckNotAllowed: 'Health checks at udp_check_port {0} of a node address would reach an address not allowed for a backend node on this server',
      udpCheckPassive: 'check_passive is not supported with protocol udp',
      udpCipherSuite: 'cipher_suite must be none with protocol udp',
      cipherNoneNeedsUdp: 'cipher_suite none is only allowed with protocol udp',
      udpSessionTimeout: 'udp_session_timeout is read-only',
      modeNoneNeedsUdp: 'mode none is only allowed for nodes of a udp config',
    });
  });

  it('lists the Managed Database validation texts (control-plane/domain/databases/validation.ts)', () => {
    expect(render(databaseReasons)).toEqual({
      required: '{0} is required',
      labelType: 'Label must be a string',
      labelLength: 'Label must be between 3 and 32 characters',
      labelUnique: 'Label must be unique among your databases',
      regionInvalid: 'region is not valid',
      typeInvalid: 'type is not valid; see /databases/types',
      engineUnavailable: 'Engine {0} is not available; see /databases/engines for the engines offered',
      engineNotString: 'engine is not available; see /databases/engines for the engines offered',
      clusterSize: 'cluster_size must be 1 or 3',
      clusterSizeSpread: 'cluster_size cannot be changed while the members run on several hosts',
      replicationType: 'replication_type must be none, asynch or semi_synch',
      replicationForOne: 'replication_type must be none for a cluster_size of 1',
      replicationForThree: 'replication_type must be asynch or semi_synch for a cluster_size of 3',
      trueOrFalse: '{0} must be true or false',
      allowListArray: 'allow_list must be an array of IPv4 addresses or CIDR ranges',
      allowListMax: 'allow_list may have at most {0} entries',
      allowListEntry: '"{0}" is not a valid IPv4 address or CIDR range',
      allowListEntryNotString: 'This entry is not a valid IPv4 address or CIDR range',
      updatesObject: 'updates must be an object',
      frequency: 'frequency must be weekly or monthly',
      integerFromTo: '{0} must be an integer from {1} to {2}',
      weekForWeekly: 'week_of_month must be null for a weekly frequency',
      weekForMonthly: 'week_of_month (1-4) is required for a monthly frequency',
      resizeToMoreDisk: 'A database can only be resized to a plan with more disk than {0}',
      typeWithAllowList: 'type and allow_list cannot be changed in the same request',
      immutable: '{0} cannot be changed after creation',
      notYet: '{0} is not supported yet',
      versionUnavailable: 'version {0} is not available; see /databases/engines for the versions offered',
      versionDowngrade: 'version can only be upgraded from {0}, not lowered',
      snapshotLabel: 'label must be 1 to 30 characters of ASCII letters, digits and underscore',
      snapshotLabelTaken: 'A backup labelled {0} already exists for this database',
      target: 'target must be primary or secondary',
      targetSecondary: 'target secondary needs a cluster_size of 3',
      forkObject: 'fork must be an object with source and restore_time',
      forkSource: 'fork.source must be the id of a MySQL database you can read',
      forkSourceStatus: 'fork.source must be active, backing_up, degraded or failed to be forked; it is {0}',
      forkEngine: "A fork must use its source's engine {0}",
      forkTime: 'fork.restore_time must be a UTC date and time such as 2026-01-02T03:04:05',
      forkNoHistory: 'fork.source has no point in time to restore yet (its oldest_restore_time is null)',
      forkTimeRange: 'fork.restore_time must be from {0} (oldest_restore_time) to {1}',
    });
  });

  it('lists the engine_config texts (control-plane/domain/databases/engine-config.ts)', () => {
    expect(render(engineConfigReasons)).toEqual({
      object: 'engine_config must be an object',
      mysqlObject: 'engine_config.mysql must be an object',
      unknown: '{0} is not a setting of MySQL databases; see /databases/mysql/config',
      refused: '{0} cannot be set on these servers: {1}',
      typeInteger: '{0} must be an integer',
      typeBoolean: '{0} must be true or false',
      typeString: '{0} must be a string',
      range: '{0} must be from {1} to {2}',
      length: '{0} must be {1} to {2} characters long',
      format: '{0} is not in a valid format, e.g. {1}',
      sqlMode: 'sql_mode {0} is not a MariaDB SQL mode',
    });
  });

  it('lists the fleet texts (control-plane/domain/fleet/validation.ts)', () => {
    expect(render(fleetReasons)).toEqual({
      role: 'role must be dataplane or agent',
      id: 'id must be 1 to 64 letters, digits, dots, dashes or underscores, starting with a letter or digit',
      region: 'region must be * or a region id from /regions',
      expiry: 'expiry_seconds must be an integer from 60 to 604800',
    });
  });

  // Texts outside the three tables: the shared kernel, auth and users, and the state conflicts of
  // the services. The scan covers control-plane/ and lib/, so a text added anywhere there fails here.
  it('lists every text written at an error site in control-plane/ and lib/', () => {
    const found = new Set<string>();
    for (const file of [...productFiles(join(repoRoot, 'control-plane')), ...productFiles(join(repoRoot, 'lib'))]) {
      for (const text of errorSiteTexts(file)) found.add(text);
    }
    // Written as in the source: `${...}` stands for the part filled in when the error is raised.
    expect([...found].sort()).toEqual([
      '${kind} must be an array',
      '${k} cannot be changed on this server',
      '${k} is not a field of an OAuth client',
      '${k} is not supported by this server',
      '${k} must be a boolean',
      "${k} must be one of ${interfaceSettings.join(', ')}",
      "${k} must be one of ${maintenancePolicies.join(', ')}",
      'A credentials reset is already in progress.',
      'A public client has no secret',
      "Agent ${id} cannot be drained: ${refusals.join('; ')}.",
      'Agent ${id} was declared lost; its members are re-placed already.',
      'An account may have at most ${MAX_CLIENTS} OAuth clients',
      'Could not generate a unique label; send one',
      'Invalid Token',
      'Invalid scope ${p}',
      'Length must be 1-100 characters',
      'Length must be 1-512 characters',
      'Must be a valid email address.',
      'Must be the id of an agent host.',
      'No ${kind} with id ${String(id)} on this account',
      'No ${this.what} addresses are configured for region ${region}',
      'No NodeBalancer IPv6 addresses are left in the pool',
      'No NodeBalancer addresses are left in the pool',
      'No database endpoint addresses are left in the pool',
      'Not found',
      "Scopes may not exceed those of the acting token: ${beyond.join(' ')}",
      'Stats are unavailable at this time.',
      'This database already has ${MAX_SNAPSHOTS} snapshots, the most it may keep; delete one first.',
      'Unauthorized',
      'Unknown account setting ${k}',
      'Unknown global grant ${k}',
      'Unknown profile field ${k}',
      'Username is taken',
      'Username must be 3-32 letters, digits, dashes or underscores, starting and ending with a letter or digit',
      'You cannot delete yourself',
      'You cannot restrict yourself',
      "Your database has a member being moved to another host (from agent ${moving.join(', agent ')}: lost, draining or seeding); it can be suspended once every member runs on a host again.",
      "Your database has a member on a host being drained (agent ${draining.join(', agent ')}); a change that restarts its members can be made once the drain is done.",
      'Your database is ${status}; it can be ${verbs[op]} only when it is ${list}.',
      'Your database is provisioning; please wait until provisioning is complete to perform this operation.',
      'a move of this database is already under way',
      'a switchover of this database is already under way',
      'email is required',
      'expiry must be a datetime like 2030-01-01T00:00:00',
      'expiry must be in the future',
      'global must be an object',
      'grant must be an object',
      'label is required',
      'label must be a string',
      'permissions must be read_only, read_write or null',
      'preferences may be at most ${MAX_PREFERENCES_BYTES} bytes as JSON',
      'preferences may nest at most ${MAX_PREFERENCES_DEPTH} levels',
      'preferences must be a JSON object',
      'public must be a boolean',
      'redirect_uri is required',
      'redirect_uri must be an http or https URL without a query or fragment',
      'restricted must be a boolean',
      'scopes must be a string',
      'scopes must not be empty',
      'the PostgreSQL connection was lost during the transaction; nothing of it was committed',
      'the PostgreSQL connection was lost while committing; the transaction may or may not have been committed',
      'the cluster changed during the switchover (a failover, a scale or a delete)',
      'the database is gone',
      'the database no longer runs as one node on agent ${from}',
      'the primary has no placement',
      'timezone must be a valid IANA time zone name',
      'username is required',
    ]);
  });
});
