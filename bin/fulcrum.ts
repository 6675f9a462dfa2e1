/**
 * The `fulcrum` command: `lab` (everything on one machine), `control-plane`, `dataplane`,
 * `agent` (each on its own for multi-host installs), `token create` and `join-token create`.
 */
import { runLab } from './lab.js';
import { parseFlags } from '../lib/args.js';
import { commandUsage, labFlags, usage } from './flags.js';
import { restrictUmask } from '../lib/private-files.js';


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
    case 'join-token': {
      if (rest[0] !== 'create') throw new Error(commandUsage('join-token create'));
      const { runJoinTokenCreate } = await import('./commands.js');
      return runJoinTokenCreate(rest.slice(1));
    }
    case 'token': {
      if (rest[0] !== 'create') throw new Error(commandUsage('token create'));
      const { runTokenCreate } = await import('./commands.js');
      return runTokenCreate(rest.slice(1));
    }
    case 'kek': {
      if (rest[0] !== 'rotate') throw new Error(commandUsage('kek rotate'));
      const { runKekRotate } = await import('./commands.js');
      return runKekRotate(rest.slice(1));
    }
    case 'store': {
      if (rest[0] !== 'migrate') throw new Error(commandUsage('store migrate'));
      const { runStoreMigrate } = await import('./commands.js');
      return runStoreMigrate(rest.slice(1));
    }
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
