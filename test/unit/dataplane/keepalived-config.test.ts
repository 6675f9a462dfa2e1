import { describe, expect, it } from 'vitest';
import { advertAddress, renderKeepalivedConfig, validateVrrpSettings } from '../../../dataplane/vrrp/keepalived-config.js';

const base = { iface: 'eth0', peers: ['198.19.1.11', '198.19.1.12'], priority: 120, routerId: 7, name: 'dp-a' };

describe('keepalived configuration of a data plane in pair mode', () => {
  it('holds every served address outside the advert, and adverts carry one constant address', () => {
    const a = renderKeepalivedConfig({ ...base, addresses: ['198.18.100.3', '198.18.100.2', '198.18.100.2'], checkScript: '/s/alive.sh', scriptUser: 'root' });
    const b = renderKeepalivedConfig({ ...base, addresses: ['198.18.100.2'], checkScript: '/s/alive.sh', scriptUser: 'root' });
    const advert = (t: string) => /virtual_ipaddress \{([^}]*)\}/.exec(t)![1];
    // Two data planes a snapshot apart still send identical adverts (else both become master).
    expect(advert(a)).toEqual(advert(b));
    expect(advert(a).trim()).toBe(`${advertAddress(7)}/32 dev lo`);
    const held = /virtual_ipaddress_excluded \{([^}]*)\}/.exec(a)![1]!.trim().split('\n').map((l) => l.trim());
    expect(held).toEqual(['198.18.100.2/32 dev eth0', '198.18.100.3/32 dev eth0']);
  });

  it('talks unicast to its peers only, never preempts, and tracks the data plane', () => {
    const t = renderKeepalivedConfig({ ...base, addresses: [], checkScript: '/s/alive.sh', scriptUser: 'fulcrum' });
    expect(t).toMatch(/unicast_peer \{\s+198\.19\.1\.11\s+198\.19\.1\.12\s+\}/);
    expect(t).toContain('check_unicast_src');
    expect(t).toContain('nopreempt');
    expect(t).toContain('state BACKUP');
    expect(t).toContain('virtual_router_id 7');
    expect(t).toContain('priority 120');
    expect(t).toContain('script "/s/alive.sh"');
    expect(t).toContain('script_user fulcrum');
    expect(t).toMatch(/track_script \{\s+fulcrum_dataplane_alive\s+\}/);
  });

  it('keeps odd characters of names out of the file', () => {
    const t = renderKeepalivedConfig({ ...base, name: 'dp a"}\n', addresses: ['not-an-ip', '198.18.100.2'], checkScript: '/s', scriptUser: 'x y' });
    expect(t).toContain('router_id dp_a___');
    expect(t).toContain('script_user x_y');
    expect(t).not.toContain('not-an-ip');
  });

  it.each([
    [{ iface: 'eth0; rm' }, 'interface'],
    [{ peers: ['198.19.1.300'] }, 'vrrp-peers'],
    [{ priority: 0 }, 'vrrp-priority'],
    [{ priority: 255 }, 'vrrp-priority'],
    [{ routerId: 256 }, 'vrrp-router-id'],
  ])('refuses %j', (over, words) => {
    expect(() => validateVrrpSettings({ ...base, ...over })).toThrow(words);
  });
});
