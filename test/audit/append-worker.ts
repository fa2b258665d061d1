// Child process for the concurrency test: appends COUNT records tagged with WORKER to the log FILE.
import { openAuditLog } from '../../src/audit/index.js';

const [file, count, worker] = process.argv.slice(2);
if (!file || !count || !worker) {
  process.stderr.write('usage: append-worker FILE COUNT WORKER\n');
  process.exit(3);
}
const log = openAuditLog(file, { lock: { timeoutMs: 60_000 } });
for (let i = 0; i < Number(count); i++) log.append({ type: 'ran', request_id: `TR-${worker}-${i}`, actor: `worker ${worker}`, detail: { worker: Number(worker), i } });
