// One UTP tool call as an agent makes it, with the TypeScript client (the README's utp-client
// snippet as a script): node examples/call-tool.mjs --project demo [--db URL_OR_FILE] [CODE]
// --wait SEC: how long to wait for a worker that is still starting (default 10).
// --db must name the store the worker uses (`airlock serve --nats ... --db ...`): the call card is
// written there and the answer read from there. Without it: the SQLite store in the workspace.
import { homedir } from 'node:os';
import { join } from 'node:path';
import { setTimeout as sleep } from 'node:timers/promises';
import { parseArgs } from 'node:util';
import { callTool, connectNats, openStore } from '@airlock-host/airlock/client';

const { values, positionals } = parseArgs({
  allowPositionals: true,
  options: {
    project: { type: 'string', default: 'demo' },
    channel: { type: 'string', default: 'main' },
    nats: { type: 'string', default: 'nats://127.0.0.1:4222' },
    db: { type: 'string' },
    wait: { type: 'string', default: '10' },
  },
});
const code = positionals[0] ?? 'print(1+1)';

const nats = await connectNats(values.nats);
const store = await openStore(values.db, process.env.AIRLOCK_HOME ?? join(homedir(), '.airlock'));
try {
  const call = { nats, store, project: values.project, channel: values.channel, tool: 'python.run',
    agentId: 'agent-1', agentTurnId: `turn-${Date.now()}`, toolCallId: `call-${Date.now()}`, turnEpoch: 1,
    arguments: { code }, timeoutMs: 30_000 };
  // A worker just started may not have made its stream yet (UTPC_PUBLISH): try again for --wait
  // seconds. The same tool_call_id each time, so a call is never made twice.
  const until = Date.now() + Number(values.wait) * 1000;
  let r = await callTool(call);
  while (!r.ok && r.problems[0]?.code === 'UTPC_PUBLISH' && Date.now() < until) {
    await sleep(250);
    r = await callTool(call);
  }
  console.log(JSON.stringify(r.ok ? { status: r.status, result: r.content.result } : { problems: r.problems }));
  process.exitCode = r.ok && r.status === 'success' ? 0 : 1;
} finally {
  await Promise.all([nats.close(), store.close()]);
}
