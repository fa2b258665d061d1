// One UTP worker as its own process for the many-runs load test: the workspace's own SQLite store,
// real NATS. argv[2]: JSON { nats, stream, durable, workspace, runsFile }. Each run is appended to
// runsFile before the tool starts, so a run in a worker that is killed during it still counts.
import { appendFileSync } from 'node:fs';
import { join } from 'node:path';
import { SqliteStore } from '../../src/store/sqlite.js';
import { connectNats } from '../../src/utp/connect.js';
import { UtpService } from '../../src/utp/service.js';
import { openWorkspace } from '../../src/workspace/workspace.js';

const cfg = JSON.parse(process.argv[2] ?? '{}') as { nats: string; stream: string; durable: string; workspace: string; runsFile: string };
const ws = openWorkspace(cfg.workspace);
const store = new SqliteStore(join(ws.root, 'airlock.db'));
await store.init();
const nc = await connectNats(cfg.nats);
const service = new UtpService({
  nats: nc,
  store,
  workspace: ws,
  stream: cfg.stream,
  durable: cfg.durable,
  // Generous against a loaded 2-core machine (a late heartbeat must not lose a live run's lease).
  leaseMs: 4000,
  ackWaitMs: 5000,
  sweepMs: 300,
  wakeupRetryMs: 1000,
  concurrency: 3,
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
