/**
 * The texts the fleet endpoints answer with (join tokens, removing a data plane or agent);
 * test/unit/api/error-inventory.test.ts lists them.
 */
export const fleetReasons = {
  role: 'role must be dataplane or agent',
  id: 'id must be 1 to 64 letters, digits, dots, dashes or underscores, starting with a letter or digit',
  region: 'region must be * or a region id from /regions',
  expiry: 'expiry_seconds must be an integer from 60 to 604800',
};
