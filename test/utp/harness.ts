import { randomBytes } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { NatsConnection } from 'nats';
import { PostgresStore } from '../../src/store/postgres.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import type { Store, ToolRecord } from '../../src/store/types.js';
import { connectNats } from '../../src/utp/connect.js';
import { UtpService, type ServiceOptions } from '../../src/utp/service.js';
import { BUILTIN_TOOLS, defaultToolSubject } from '../../src/utp/tools.js';
import { openWorkspace, type Workspace } from '../../src/workspace/workspace.js';
import { disposePostgres, freshPostgres, NATS_URL } from '../store/services.js';
import { addOperator, signTool } from '../helpers/operator.js';
import { addOperatorToPolicy } from '../../src/policy/operators.js';

/** A whole UTP deployment for one test file: NATS, a store, registered tools, one service. */
export interface Harness {
  nc: NatsConnection;
  store: Store;
  ws: Workspace;
  project: string;
  channel: string;
  stream: string;
  durable: string;
  service: UtpService;
  logs: Record<string, unknown>[];
  runs: string[];
  subject(tool: string): string;
  /** The operator who signs the harness's tools (listed in its workspace policy). */
  registrar: { name: string; keyDir: string; publicKey: string };
  /** Replaces the workspace policy with `text`, its operators plus the harness's registrar (whose tools would stop otherwise). */
  writePolicy(text: string): void;
  /** Writes `t` to the store signed by the harness's operator (`registrar`), as `airlock tools add` would. */
  register(t: ToolRecord): Promise<void>;
  stop(): Promise<void>;
}

export async function natsOrFail(): Promise<NatsConnection> {
  try {
    return await connectNats(NATS_URL, { timeoutMs: 2000 });
  } catch (e) {
    throw new Error(`NATS with JetStream is required for this test at ${NATS_URL}: ${(e as Error).message}\nStart it with \`nats-server -js\` or set AIRLOCK_TEST_NATS.`, { cause: e });
  }
}

export const token = (prefix: string): string => `${prefix}${randomBytes(5).toString('hex')}`;

/** A tool row of a test: an echo on its default subject unless `over` says otherwise. */
export const toolRow = (project: string, channel: string, name: string, over: Partial<ToolRecord>): ToolRecord => ({
  project_id: project,
  tool_name: name,
  target_subject: defaultToolSubject('v1', project, channel, name),
  description: name,
  parameters: { type: 'object' },
  after_execution: 'suspend',
  options: { runner: 'echo' },
  ...over,
});

/** The tools every harness registers (builtins plus a few test shapes). */
export function testTools(project: string, channel: string): ToolRecord[] {
  const b = (name: string, over: Partial<ToolRecord> = {}): ToolRecord => ({
    project_id: project,
    tool_name: name,
    target_subject: defaultToolSubject('v1', project, channel, name),
    ...(BUILTIN_TOOLS[name.startsWith('echo') ? 'echo' : name] as Pick<ToolRecord, 'description' | 'parameters' | 'options' | 'after_execution'>),
    ...over,
  });
  return [
    b('echo'),
    b('python.run'),
    b('sandbox.exec'),
    b('echo.short', { options: { runner: 'echo', limits: { wall_ms: 300 } } }),
    b('echo.approve', { options: { runner: 'echo', approval: { required: true, timeout_ms: 1500 } } }),
    b('echo.strict', { parameters: { type: 'object', properties: { n: { type: 'integer', minimum: 0 } }, required: ['n'], additionalProperties: false } }),
    b('wc', { after_execution: 'suspend', description: 'print a text through a command template', parameters: { type: 'object', properties: { text: { type: 'string' } }, required: ['text'] }, options: { runner: 'command', argv: ['/usr/bin/printf', '%s', '{{text}}'] } }),
  ];
}

export async function startHarness(
  opts: { db: 'sqlite' | 'postgres'; service?: Partial<ServiceOptions>; store?: (s: Store) => Store; tools?: (project: string, channel: string) => ToolRecord[] } = { db: 'sqlite' },
): Promise<Harness> {
  const nc = await natsOrFail();
  const dir = mkdtempSync(join(tmpdir(), 'airlock-utp-'));
  const ws = openWorkspace(dir);
  let store: Store;
  if (opts.db === 'postgres') store = await freshPostgres();
  else {
    store = new SqliteStore(join(dir, 'airlock.db'));
    await store.init();
  }
  const project = token('p');
  const channel = 'ch1';
  // Extra rows go straight to the store (unchecked), signed by the harness's operator.
  const registrar = { name: 'registrar', ...addOperator(ws.policyFile, 'registrar') };
  for (const t of [...testTools(project, channel), ...(opts.tools?.(project, channel) ?? [])]) await store.upsertTool(signTool(t, registrar));
  const stream = token('AIRLOCK_T_').toUpperCase();
  const durable = token('airlock-t-');
  const logs: Record<string, unknown>[] = [];
  const runs: string[] = [];
  const service = new UtpService({
    nats: nc,
    store: opts.store ? opts.store(store) : store,
    workspace: ws,
    stream,
    durable,
    leaseMs: 1000,
    ackWaitMs: 2000,
    sweepMs: 200,
    wakeupRetryMs: 1000,
    maxPayloadBytes: 64 * 1024,
    approvalPollMs: 50,
    log: (e) => logs.push(e),
    onRun: (c) => runs.push(c.tool_call_id),
    ...opts.service,
  });
  await service.start();
  return {
    nc,
    store,
    ws,
    project,
    channel,
    stream,
    durable,
    service,
    logs,
    runs,
    subject: (tool) => defaultToolSubject('v1', project, channel, tool),
    registrar,
    writePolicy: (text) => {
      writeFileSync(ws.policyFile, text);
      const err = addOperatorToPolicy(ws.policyFile, registrar.name, registrar.publicKey);
      if (err) throw new Error(err);
    },
    register: (t) => store.upsertTool(signTool(t, registrar)),
    stop: async () => {
      await service.stop();
      const jsm = await nc.jetstreamManager();
      await jsm.streams.delete(stream).catch(() => undefined);
      await nc.close();
      if (store instanceof PostgresStore) await disposePostgres(store);
      else await store.close();
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

/**
 * A store whose claim fails while `failures.left > 0` (each failure counts it down; Infinity: down for
 * good): the service must nak and JetStream redeliver.
 */
export function failingClaims(failures: { left: number }, message: string): (s: Store) => Store {
  return (s) =>
    new Proxy(s, {
      get(target, prop, recv) {
        if (prop === 'claim' && failures.left > 0) {
          return async () => {
            failures.left--;
            throw new Error(message);
          };
        }
        const v = Reflect.get(target, prop, recv);
        return typeof v === 'function' ? v.bind(target) : v;
      },
    });
}

export const sleep = (ms: number) => new Promise((r) => setTimeout(r, ms));

/** Waits until `f` returns a value (polling), or fails after `ms`. */
export async function eventually<T>(f: () => Promise<T | undefined> | T | undefined, ms = 5000, what = 'condition'): Promise<T> {
  const end = Date.now() + ms;
  for (;;) {
    const v = await f();
    if (v !== undefined) return v;
    if (Date.now() > end) throw new Error(`timed out after ${ms} ms waiting for ${what}`);
    await sleep(25);
  }
}
