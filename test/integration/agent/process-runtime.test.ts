import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { silentLogger } from '../../../lib/logger.js';
import { detectLocalCatalogue } from '../../../agent/catalogue.js';
import { createProcessRuntime } from '../../../agent/runtime/process-runtime.js';
import { runtimeContract } from './runtime-contract.js';

runtimeContract('process', async () => {
  const root = mkdtempSync(join(tmpdir(), 'fulcrum-prt-'));
  const [engine] = await detectLocalCatalogue();
  if (!engine) throw new Error('no local mariadbd found: the process runtime needs mariadb-server installed');
  const make = () => createProcessRuntime({ root: join(root, 'runtime'), logger: silentLogger() });
  return {
    runtime: make(),
    engine,
    root: join(root, 'data'),
    reopen: async () => make(),
    cleanup: async () => rmSync(root, { recursive: true, force: true }),
  };
});
