import type { Registry } from 'prom-client';
import type { Clock } from '../lib/clock.js';
import type { Logger } from '../lib/logger.js';
import type { AgentDesired__Output } from '../proto/gen/fulcrum/v1/AgentDesired.js';
import type { AgentReport } from '../proto/gen/fulcrum/v1/AgentReport.js';
import type { Catalogue } from './catalogue.js';
import type { ContainerRuntime } from './runtime/container-runtime.js';

export interface AgentOptions {
  id: string;
  stateDir: string;
  runtime: ContainerRuntime;
  runtimeKind: 'process' | 'docker';
  catalogue: Catalogue;
  logger: Logger;
  registry: Registry;
  clock: Clock;
  nodeAddressPool?: string;
  reconcileIntervalMs?: number;
}

export type AgentObservation = Omit<AgentReport, 'agentId' | 'region' | 'atMs' | 'hello' | 'heartbeat'>;

export interface Agent {
  start(): Promise<void>;
  setDesired(desired: AgentDesired__Output): void;
  report(): AgentObservation;
  onChange(listener: () => void): void;
  close(): Promise<void>;
}

/** Placeholder core: reports the catalogue and no databases (databases arrive with issue 7). */
export function createAgent(opts: AgentOptions): Agent {
  let version = 0;
  const listeners: (() => void)[] = [];
  return {
    async start() {},
    setDesired(d) {
      version = Math.max(version, d.version);
      listeners.forEach((l) => l());
    },
    report() {
      return {
        appliedVersion: version,
        databases: [],
        operationResults: [],
        runtime: opts.runtimeKind,
        engines: opts.catalogue.map((e) => ({ id: e.id, engine: e.engine, version: e.version, image: e.image ?? '', binary: e.binary ?? '' })),
      };
    },
    onChange(l) {
      listeners.push(l);
    },
    async close() {},
  };
}
