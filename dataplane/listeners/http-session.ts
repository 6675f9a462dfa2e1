import type { Socket } from 'node:net';
import type { ConfigRuntime } from '../runtime/config-runtime.js';

/** Placeholder until the HTTP fast path lands. */
export class HttpSession {
  constructor(_rt: ConfigRuntime, client: Socket, _tls: boolean) {
    client.destroy();
  }
}
