/**
 * The udp native path's policy epoch (docs/dataplane.md "UDP: the native datagram path"): one
 * Int32 that the native relay reads on every datagram of an established session. A session is
 * relayed in C only while the epoch it was established in is the current one; anything the udp
 * listener's policy reads per datagram (a node's status, mode or retirement, a config's spec, the
 * config a listener serves) bumps it, which sends every session back through JavaScript once,
 * where the policy decides again and re-establishes the ones it still can. Such changes are rare
 * (health flips, snapshots), so the cost is one trip through JavaScript per session per change.
 */
export const policyEpoch = new Int32Array(1);

export function bumpPolicyEpoch(): void {
  policyEpoch[0] = (policyEpoch[0]! + 1) & 0x7fffffff;
}
