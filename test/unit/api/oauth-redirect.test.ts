import { describe, expect, it } from 'vitest';
import { redirectMatches } from '../../../control-plane/domain/auth/oauth-service.js';

/** The redirect URI rule of the OAuth login (docs/security/api.md, "OAuth login"). */
describe('redirectMatches', () => {
  const cm = 'https://cm.example.test/oauth/callback';

  it('accepts the registered URI, with any query after it', () => {
    expect(redirectMatches(cm, cm)).toBe(true);
    expect(redirectMatches(cm, `${cm}?returnTo=/linodes`)).toBe(true);
    expect(redirectMatches(cm, `${cm}?`)).toBe(true);
  });

  it('refuses anything else: another host, path, scheme, port, user information, a fragment, spaces', () => {
    for (const given of [
      'https://evil.example.test/oauth/callback', `${cm}x`, `${cm}/`, 'https://cm.example.test/oauth/callback/../x',
      'https://cm.example.test/oauth/', 'http://cm.example.test/oauth/callback', 'https://cm.example.test:443/oauth/callback',
      'https://cm.example.test:8443/oauth/callback', 'https://user@cm.example.test/oauth/callback', `${cm}#x`, `${cm}?a=1#x`,
      `${cm} `, 'HTTPS://cm.example.test/oauth/callback', 'https://CM.example.test/oauth/callback', '',
    ]) expect(redirectMatches(cm, given), given).toBe(false);
  });

  it('matches a registered loopback URI without a port on any port, and nothing else', () => {
    expect(redirectMatches('http://localhost', 'http://localhost:41234')).toBe(true);
    expect(redirectMatches('http://localhost', 'http://localhost:41234/')).toBe(true);
    expect(redirectMatches('http://localhost', 'http://localhost')).toBe(true);
    expect(redirectMatches('http://127.0.0.1/cb', 'http://127.0.0.1:8000/cb?x=1')).toBe(true);
    expect(redirectMatches('http://[::1]/cb', 'http://[::1]:8000/cb')).toBe(true);
    for (const given of [
      'http://localhost:0', 'http://localhost:65536', 'http://localhost:1/cb', 'http://127.0.0.1:41234', 'https://localhost:41234',
      'http://localhost.evil.test:41234', 'http://user@localhost:41234', 'http://localhost:41234@evil.test', 'http://localhost:41234#x',
    ]) expect(redirectMatches('http://localhost', given), given).toBe(false);
    // Only a registered loopback URI without a port gets the allowance.
    expect(redirectMatches('http://localhost:3000/oauth/callback', 'http://localhost:3001/oauth/callback')).toBe(false);
    expect(redirectMatches('https://cm.example.test/cb', 'https://cm.example.test:8443/cb')).toBe(false);
  });
});
