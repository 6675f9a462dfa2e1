import { describe, expect, it } from 'vitest';
import { accountHost, desiredAdminHosts } from '../../../agent/mysql/accounts.js';
import { bufferPoolMb, renderNodeConfig } from '../../../agent/mysql/config-render.js';
import { gtidSeq } from '../../../agent/mysql/replication.js';
import { compileAllowList } from '../../../lib/allow-list.js';
import { parseServerVersion } from '../../../agent/catalogue.js';

describe('accountHost', () => {
  it('turns allow_list entries into MariaDB account hosts', () => {
    expect(accountHost('0.0.0.0/0')).toBe('%');
    expect(accountHost('203.0.113.1')).toBe('203.0.113.1');
    expect(accountHost('203.0.113.1/32')).toBe('203.0.113.1');
    expect(accountHost('192.0.1.77/24')).toBe('192.0.1.0/255.255.255.0');
    expect(accountHost('10.1.2.3/9')).toBe('10.0.0.0/255.128.0.0');
    expect(accountHost('300.1.1.1')).toBeUndefined();
    expect(accountHost('1.2.3.4/33')).toBeUndefined();
    expect(accountHost('nope')).toBeUndefined();
  });
  it('deduplicates and sorts', () => {
    expect(desiredAdminHosts(['127.0.0.2', '127.0.0.2/32', '0.0.0.0/0'])).toEqual(['%', '127.0.0.2']);
    expect(desiredAdminHosts([])).toEqual([]);
  });
});

describe('compileAllowList', () => {
  it('empty allows nobody, 0.0.0.0/0 everybody, CIDRs their range', () => {
    expect(compileAllowList([])('127.0.0.2')).toBe(false);
    expect(compileAllowList(['0.0.0.0/0'])('8.8.8.8')).toBe(true);
    const a = compileAllowList(['127.0.0.2/32', '10.0.0.0/8']);
    expect(a('127.0.0.2')).toBe(true);
    expect(a('::ffff:127.0.0.2')).toBe(true);
    expect(a('127.0.0.3')).toBe(false);
    expect(a('10.200.1.1')).toBe(true);
    expect(compileAllowList(['127.0.0.3'])('127.0.0.3')).toBe(true);
    expect(compileAllowList(['garbage'])('127.0.0.3')).toBe(false);
  });
});

describe('renderNodeConfig', () => {
  const base = { databaseId: 7, index: 2, memoryMb: 1024, semiSync: false, ssl: true, encrypted: false };
  it('gives every node the replication baseline and boots read-only', () => {
    const c = renderNodeConfig(base);
    for (const l of ['server_id=2', 'log_basename=db7-n2', 'gtid_strict_mode=ON', 'read_only=ON', 'skip_slave_start=ON', 'require_secure_transport=ON', 'proxy_protocol_networks=localhost', 'local_infile=OFF']) {
      expect(c).toContain(l);
    }
    expect(c).not.toContain('rpl_semi_sync');
    expect(c).not.toContain('file_key_management');
  });
  it('runs with the server_id the control plane gave a re-placed member, its files still named by index', () => {
    const c = renderNodeConfig({ ...base, serverId: 5 });
    expect(c).toContain('server_id=5\n');
    expect(c).not.toContain('server_id=2');
    expect(c).toContain('log_basename=db7-n2');
    // 0 is what an older control plane sends: the index, as before.
    expect(renderNodeConfig({ ...base, serverId: 0 })).toContain('server_id=2\n');
  });
  it('adds semi-sync and encryption at rest when asked', () => {
    const c = renderNodeConfig({ ...base, semiSync: true, encrypted: true, ssl: false });
    // The master side is switched on at run time on the primary only.
    expect(c).not.toContain('rpl_semi_sync_master_enabled');
    expect(c).toContain('rpl_semi_sync_slave_enabled=ON');
    expect(c).toContain('rpl_semi_sync_master_wait_point=AFTER_SYNC');
    expect(c).toContain('plugin_load_add=file_key_management');
    expect(c).toContain('innodb_encrypt_tables=ON');
    expect(c).toContain('require_secure_transport=OFF');
  });
  it('never falls back to asynchronous replication for a cluster spread over hosts', () => {
    const one = renderNodeConfig({ ...base, semiSync: true });
    expect(one).toContain('rpl_semi_sync_master_timeout=5000');
    expect(one).not.toContain('wait_no_slave');
    const spread = renderNodeConfig({ ...base, semiSync: true, semiSyncNoFallback: true });
    expect(spread).toContain('rpl_semi_sync_master_timeout=4294967295');
    expect(spread).toContain('rpl_semi_sync_master_wait_no_slave=ON');
  });
  it('appends engine_config restart options, never over its own settings or with a line break', () => {
    const c = renderNodeConfig({ ...base, options: { innodb_ft_min_token_size: '2', read_only: 'OFF', 'bad name': '1', innodb_rollback_on_timeout: 'ON\nlocal_infile=ON' } });
    expect(c.trimEnd().split('\n').at(-1)).toBe('innodb_ft_min_token_size=2');
    expect(c).not.toContain('read_only=OFF');
    expect(c).not.toContain('bad name');
    expect(c).not.toContain('local_infile=ON');
    expect(c).not.toContain('innodb_rollback_on_timeout');
  });
  it('sizes the buffer pool from the plan', () => {
    expect(bufferPoolMb(1024)).toBe(128);
    expect(bufferPoolMb(100)).toBe(32);
    expect(bufferPoolMb(1 << 20)).toBe(4096);
  });
});

describe('small parsers', () => {
  it('gtidSeq takes the highest sequence number', () => {
    expect(gtidSeq('0-1-42')).toBe(42);
    expect(gtidSeq('0-1-42,1-2-7')).toBe(42);
    expect(gtidSeq('')).toBe(0);
  });
  it('parseServerVersion reads mariadbd --version', () => {
    expect(parseServerVersion('mariadbd  Ver 10.11.19-MariaDB-0+deb12u1 for debian-linux-gnu on x86_64 (Debian 12)')).toBe('10.11.19');
    expect(parseServerVersion('/usr/sbin/mysqld  Ver 8.0.36 for Linux on x86_64 (MySQL Community Server - GPL)')).toBe('8.0.36');
    expect(parseServerVersion('nonsense')).toBeUndefined();
  });
});
