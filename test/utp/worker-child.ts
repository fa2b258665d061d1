import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { PostgresStore } from '../../src/store/postgres.js';
import { SqliteStore } from '../../src/store/sqlite.js';
import { connectNats } from '../../src/utp/connect.js';
import { UtpService } from '../../src/utp/service.js';
import { openWorkspace } from '../../src/workspace/workspace.js';

/**
 * One Airlock worker as its own process (workers.test.ts starts three and SIGKILLs one; the
 * many-runs load test kills and restarts one). argv[2]: JSON { nats, stream, durable, workspace,
 * runsFile, leaseMs, ackWaitMs, concurrency?, pg?, schema? }: PostgreSQL when `pg` is given, else the
 * workspace's own SQLite store. Every tool run is appended to runsFile before the tool runs, so a run
 * is counted even if the process dies during it.
 */
const cfg = JSON.parse(process.argv[2] ?? '{}') as {
  nats: string;
  pg?: string;
  schema?: string;
  stream: string;
  durable: string;
  workspace: string;
  runsFile: string;
  leaseMs: number;
  ackWaitMs: number;
  concurrency?: number;
};
const nc = await connectNats(cfg.nats);
const ws = openWorkspace(cfg.workspace);
const store = cfg.pg ? new PostgresStore(cfg.pg, { schema: cfg.schema ?? 'public', poolSize: 8 }) : new SqliteStore(join(ws.root, 'airlock.db'));
await store.init();
const service = new UtpService({
  nats: nc,
  store,
  workspace: ws,
  stream: cfg.stream,
  durable: cfg.durable,
  leaseMs: cfg.leaseMs,
  ackWaitMs: cfg.ackWaitMs,
  sweepMs: 200,
  wakeupRetryMs: 1000,
  concurrency: cfg.concurrency ?? 16,
  log: () => undefined,
  onRun: (c) => appendFileSync(cfg.runsFile, `${process.pid} ${c.tool_call_id}\n`),
});
await service.start();
process.stdout.write('ready\n');
process.on('SIGTERM', () => {
  void service.stop().then(async () => {
    await nc.close();
    await store.close();
    process.exit(0);
  });
});
