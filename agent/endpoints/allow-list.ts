import { BlockList } from 'node:net';

/**
 * allow_list semantics (reference linode-api §1.4): IPv4 addresses or CIDRs; empty allows
 * nobody; `0.0.0.0/0` allows everybody; a bare address means /32. Malformed entries are
 * ignored here (the control plane rejects them with a 400 before they reach the agent).
 */
export function compileAllowList(entries: string[]): (address: string) => boolean {
  const list = new BlockList();
  let any = false;
  for (const raw of entries) {
    const m = /^(\d{1,3}(?:\.\d{1,3}){3})(?:\/(\d{1,2}))?$/.exec(raw.trim());
    if (!m) continue;
    const prefix = m[2] === undefined ? 32 : Number(m[2]);
    if (prefix > 32 || m[1]!.split('.').some((o) => Number(o) > 255)) continue;
    list.addSubnet(m[1]!, prefix, 'ipv4');
    any = true;
  }
  return (address: string) => {
    if (!any) return false;
    const v4 = address.startsWith('::ffff:') ? address.slice(7) : address;
    if (!/^\d{1,3}(?:\.\d{1,3}){3}$/.test(v4)) return false;
    return list.check(v4, 'ipv4');
  };
}
