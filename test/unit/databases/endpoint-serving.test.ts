import { describe, expect, it } from 'vitest';
import { unboundListeners } from '../../../control-plane/domain/databases/endpoint-serving.js';

describe('the listeners a data plane NACK says it could not open', () => {
  it('reads every IPv4 address:port and reason of a listen failure, and nothing from other refusals', () => {
    expect(unboundListeners('cannot listen on 127.94.1.1:3306: EADDRINUSE, [::1]:80: EACCES, 10.0.0.2:3306: EADDRNOTAVAIL')).toEqual([
      { address: '127.94.1.1', port: 3306, reason: 'EADDRINUSE' },
      { address: '10.0.0.2', port: 3306, reason: 'EADDRNOTAVAIL' },
    ]);
    expect(unboundListeners('worker 2: cannot listen on 127.94.1.1:3306: EADDRINUSE')).toEqual([{ address: '127.94.1.1', port: 3306, reason: 'EADDRINUSE' }]);
    expect(unboundListeners('incremental snapshot base 4 is not the served version 5')).toEqual([]);
  });
});
