/**
 * The `fulcrum` command: `lab` (everything on one machine), `control-plane`, `dataplane`,
 * `agent` (each on its own for multi-host installs), `token create` and `join-token create`.
 */
import { runLab } from './lab.js';
import { parseFlags } from '../lib/args.js';
import { commandUsage, labFlags, usage } from './flags.js';
import { restrictUmask } from '../lib/private-files.js';

/** The commands of two words (`fulcrum token create`): the first word -> the whole name. */
const TWO_WORDS: Record<string, string> = { 'join-token': 'join-token create', token: 'token create', kek: 'kek rotate', store: 'store migrate', host: 'host lost' };

async function runTwoWord(first: string, rest: string[]): Promise<void> {
  const c = await import('./commands.js');
  const runs: Record<string, (argv: string[]) => Promise<void>> = {
    'join-token create': c.runJoinTokenCreate, 'token create': c.runTokenCreate, 'kek rotate': c.runKekRotate, 'store migrate': c.runStoreMigrate,
    'host lost': async (argv) => (await import('./host-commands.js')).runHostLost(argv),
    'host drain': async (argv) => (await import('./host-commands.js')).runHostDrain(argv, 'drain'),
    'host undrain': async (argv) => (await import('./host-commands.js')).runHostDrain(argv, 'undrain'),
  };
  const run = runs[`${first} ${rest[0] ?? ''}`];
  if (!run) throw new Error(commandUsage(TWO_WORDS[first]!));
  return run(rest.slice(1));
}

async function main(argv: string[]): Promise<void> {
  // Everything a Fulcrum process writes is private to its user (docs/security/secrets.md).
  restrictUmask();
  const [cmd, ...rest] = argv;
  switch (cmd) {
    case 'lab':
      return runLab(parseFlags(rest, labFlags) as Parameters<typeof runLab>[0]);
    case 'control-plane': {
      const { runControlPlaneCommand } = await import('./commands.js');
      return runControlPlaneCommand(rest);
    }
    case 'dataplane': {
      const { runDataplaneCommand } = await import('./commands.js');
      return runDataplaneCommand(rest);
    }
    case 'agent': {
      const { runAgentCommand } = await import('./commands.js');
      return runAgentCommand(rest);
    }
    case 'join-token':
    case 'token':
    case 'kek':
    case 'store':
    case 'host':
      return runTwoWord(cmd, rest);
    case undefined:
    case 'help':
    case '--help':
    case '-h':
      process.stdout.write(usage());
      return;
    default:
      throw new Error(`unknown command ${cmd}\n${usage()}`);
  }
}

main(process.argv.slice(2)).catch((err: Error) => {
  process.stderr.write(`fulcrum: ${err.message}\n`);
  process.exit(2);
});
