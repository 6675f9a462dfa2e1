import { isIpv4 } from '../../lib/ipv4.js';

/**
 * The keepalived configuration of a data plane in pair mode (docs/multi-host.md): one VRRP
 * instance per data plane whose addresses are every address the data plane serves. All data planes
 * of a region run the same instance (same router id, unicast to each other); the one in MASTER
 * holds the addresses, the others bind the same listeners without them (nonlocal bind) and take
 * over when its adverts stop.
 */
export interface VrrpSettings {
  /** The interface the addresses go on and adverts leave from, e.g. eth0. */
  iface: string;
  /** The other data planes' own addresses on that network (unicast adverts; no multicast). */
  peers: string[];
  /** 1-254; only the first election uses it (nopreempt): a returning data plane does not take back. */
  priority: number;
  /** 1-255, the same on every data plane of the region. */
  routerId: number;
  /** This data plane's id, for keepalived's router_id and logs. */
  name: string;
}

export interface RenderInput extends VrrpSettings {
  addresses: readonly string[];
  /** The liveness script keepalived runs every second (written by the supervisor). */
  checkScript: string;
  /** The user keepalived runs the script as: the data plane's own, who owns the script. */
  scriptUser: string;
}

/**
 * The liveness check's timing (docs/multi-host.md, "When the data plane itself fails"). The
 * script runs every second; the data plane must answer within ALIVE_ANSWER_S (curl's
 * --max-time, which also covers starting curl), and FALL failed runs in a row take the
 * addresses away. A wedged holder is noticed after at most one interval plus FALL runs:
 * 1 + 1 + 0.8 = 2.8 s at worst, then its priority-0 advert hands the addresses over at once.
 * A live data plane at a load average of 15 answers in milliseconds to tens of milliseconds
 * (the answer is one event-loop turn); it would have to miss 0.8 s twice in a row, a second
 * apart, to lose them. keepalived's own timeout is a backstop above curl's.
 */
export const ALIVE_ANSWER_S = 0.8;
export const ALIVE_FALL = 2;
const ALIVE_SCRIPT_TIMEOUT_S = 2;

/** Throws an Error naming the setting when one is out of range (refused at start). */
export function validateVrrpSettings(s: VrrpSettings): void {
  if (!/^[A-Za-z0-9._-]{1,15}$/.test(s.iface)) throw new Error(`--vrrp-interface ${JSON.stringify(s.iface)} is not an interface name`);
  for (const p of s.peers) if (!isIpv4(p)) throw new Error(`--vrrp-peers: ${JSON.stringify(p)} is not an IPv4 address`);
  if (s.peers.length > 16) throw new Error('--vrrp-peers: at most 16 peers');
  if (!Number.isInteger(s.priority) || s.priority < 1 || s.priority > 254) throw new Error('--vrrp-priority must be 1-254');
  if (!Number.isInteger(s.routerId) || s.routerId < 1 || s.routerId > 255) throw new Error('--vrrp-router-id must be 1-255');
}

/** keepalived's names: letters, digits, dot, dash, underscore only (the id goes into the file). */
function safeName(s: string): string {
  return s.replace(/[^A-Za-z0-9._-]/g, '_').slice(0, 64) || 'dataplane';
}

/**
 * The one address every advert carries. keepalived drops adverts whose address list differs from
 * its own, so two data planes a snapshot apart would both become master; served addresses are
 * therefore in no advert (virtual_ipaddress_excluded, which also lifts VRRP's count limit), and
 * the advert names only this constant, on loopback where all of 127/8 is local already.
 */
export function advertAddress(routerId: number): string {
  return `127.255.${routerId}.1`;
}

/** The file's text. Served addresses go on the interface as /32. */
export function renderKeepalivedConfig(r: RenderInput): string {
  const addrs = [...new Set(r.addresses.filter(isIpv4))].sort();
  const lines = [
    '# Written by the Fulcrum data plane from its snapshot; rewritten on every change.',
    'global_defs {',
    `  router_id ${safeName(r.name)}`,
    `  script_user ${safeName(r.scriptUser)}`,
    '  enable_script_security',
    '  vrrp_garp_master_repeat 3',
    '  vrrp_garp_master_refresh 10',
    '}',
    'vrrp_script fulcrum_dataplane_alive {',
    `  script "${r.checkScript}"`,
    '  interval 1',
    `  timeout ${ALIVE_SCRIPT_TIMEOUT_S}`,
    `  fall ${ALIVE_FALL}`,
    '  rise 1',
    '}',
    'vrrp_instance fulcrum {',
    '  state BACKUP',
    '  nopreempt',
    `  interface ${r.iface}`,
    `  virtual_router_id ${r.routerId}`,
    `  priority ${r.priority}`,
    '  version 3',
    '  advert_int 0.5',
    '  check_unicast_src',
    '  unicast_peer {',
    ...r.peers.map((p) => `    ${p}`),
    '  }',
    '  track_script {',
    '    fulcrum_dataplane_alive',
    '  }',
    '  virtual_ipaddress {',
    `    ${advertAddress(r.routerId)}/32 dev lo`,
    '  }',
    '  virtual_ipaddress_excluded {',
    ...addrs.map((a) => `    ${a}/32 dev ${r.iface}`),
    '  }',
    '}',
    '',
  ];
  return lines.join('\n');
}
