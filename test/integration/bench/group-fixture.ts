// A bench that starts a long-running child and then dies in native code (process.abort(), as
// better-sqlite3 12 made the control plane of bench:dataplane die on Node 24): no finally block
// and no stopAll() runs. Run by process-group.test.ts: `node --import tsx group-fixture.ts DIR`.
import { startProcess, superviseInOwnGroup } from '../../../bench/common/processes.js';

if (superviseInOwnGroup('group-fixture', 2_000)) {
  const sleeper = startProcess('sleeper', 'sleep', ['300'], process.argv[2]!);
  process.stdout.write(`sleeper ${sleeper.pid}\n`);
  setTimeout(() => process.abort(), 200);
}
