import { appendFileSync } from 'node:fs';
import { PostgresStore } from '../../src/store/postgres.js';
import { connectNats } from '../../src/utp/connect.js';
import { UtpService } from '../../src/utp/service.js';
import { openWorkspace } from '../../src/workspace/workspace.js';

/**
 * One Airlock worker as its own process (workers.test.ts starts three and SIGKILLs one).
 * argv[2]: JSON { nats, pg, schema, stream, durable, workspace, runsFile, leaseMs, ackWaitMs }.
 * Every tool run is appended to runsFile before the tool runs, so a run is counted even if the
 * process dies during it.
 */
const cfg = JSON.parse(process.argv[2] ?? '{}') as {
  nats: string;
  pg: string;
  schema: string;
  stream: string;
  durable: string;
  workspace: string;
  runsFile: string;
  leaseMs: number;
  ackWaitMs: number;
};
const nc = await connectNats(cfg.nats);
const store = new PostgresStore(cfg.pg, { schema: cfg.schema, poolSize: 8 });
await store.init();
const service = new UtpService({
  nats: nc,
  store,
  workspace: openWorkspace(cfg.workspace),
  stream: cfg.stream,
  durable: cfg.durable,
  leaseMs: cfg.leaseMs,
  ackWaitMs: cfg.ackWaitMs,
  sweepMs: 200,
  wakeupRetryMs: 1000,
  concurrency: 16,
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
