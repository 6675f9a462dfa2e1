// A bench with two registered stops, run by signal-stop.test.ts:
// `node --import tsx signal-fixture.ts MODE BOUND_MS`. MODE quick: both stops return at once;
// hang: the newest never returns; once: the older one also runs from its normal end first.
import { onStop, stopOnSignals } from '../../../bench/common/stops.js';

const [mode, bound] = process.argv.slice(2);
const say = (line: string): void => void process.stdout.write(`${line}\n`);
stopOnSignals('signal-fixture', async () => say('children stopped'), Number(bound));
let runs = 0;
const older = onStop('the older', async () => say(`stopped the older (run ${++runs})`));
onStop('the newer', async () => {
  if (mode === 'hang') await new Promise(() => undefined);
  say('stopped the newer');
});
if (mode === 'once') await older();
say('ready');
setInterval(() => undefined, 1000);
