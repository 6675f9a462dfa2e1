import { describe, expect, it } from 'vitest';
import { renderInitSql } from '../../../agent/mysql/init-sql.js';

describe('renderInitSql', () => {
  const sql = renderInitSql({ adminPassword: "a'b\\c", replPassword: 'r3pl' });
  it('keeps everything out of the binlog: sql_log_bin=0 comes first', () => {
    expect(sql.split('\n')[0]).toBe('SET SESSION sql_log_bin=0;');
  });
  it('quotes passwords as string literals (quotes and backslashes escaped)', () => {
    expect(sql).toContain("ALTER USER 'root'@'localhost' IDENTIFIED BY 'a\\'b\\\\c' REQUIRE NONE ACCOUNT UNLOCK;");
    expect(sql).toContain("ALTER USER 'fulcrum_repl'@'%' IDENTIFIED BY 'r3pl' REQUIRE SSL ACCOUNT UNLOCK;");
  });
  it('repairs before it re-creates: grant tables are swept and flushed before root and fulcrum_repl are made', () => {
    const at = (s: string) => sql.indexOf(s);
    expect(at('DELETE FROM mysql.plugin;')).toBeGreaterThan(0);
    expect(at('FLUSH PRIVILEGES;')).toBeLessThan(at("CREATE USER IF NOT EXISTS 'root'@'localhost'"));
    expect(at("INSERT INTO mysql.db (Host, Db, User, Select_priv)")).toBeLessThan(at('FLUSH PRIVILEGES;'));
  });
});
