import { startScriptedAgent } from './scripted-agent.js';

/**
 * A scripted agent in its own process (argv: target, agent id, region), so a test can freeze it
 * with SIGSTOP: its TCP connection stays open but nothing answers, as on a host cut off the
 * network. Insecure gRPC: only for control planes a test starts with `insecureGrpc`.
 */
const [target, id, region] = process.argv.slice(2);
startScriptedAgent(target!, { id: id!, region: region!, membersAcrossHosts: true });
process.stdout.write('started\n');
