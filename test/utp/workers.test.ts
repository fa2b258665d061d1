import assert from 'node:assert/strict';
import { spawn, type ChildProcess } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, test } from 'node:test';
import { fileURLToPath } from 'node:url';
import type { Msg } from 'nats';
import { parseCallback } from '../../src/contracts/utp.js';
import type { PostgresStore } from '../../src/store/postgres.js';
import { callTool } from '../../src/utp/client.js';
import { testTools, token, natsOrFail, eventually } from './harness.js';
import { disposePostgres, freshPostgres, NATS_URL, PG_URL } from '../store/services.js';
import { openWorkspace } from '../../src/workspace/workspace.js';
import { addOperator, signTool } from '../helpers/operator.js';

/**
 * Three worker processes on ONE durable consumer and one PostgreSQL store; 500 echo calls; one
 * worker is SIGKILLed in the middle. Every call is answered exactly once, none runs twice, none is
 * lost: the killed worker's claims end as failed/executor_lost after its lease expires, and the
 * messages it had fetched but not claimed are redelivered (ack_wait) to the others.
 */

const CALLS = 500;
const children: ChildProcess[] = [];
let cleanup: (() => Promise<void>) | undefined;
after(async () => {
  for (const c of children) if (c.exitCode === null && c.signalCode === null) c.kill('SIGKILL');
  await cleanup?.();
});

function startWorker(cfg: object): Promise<ChildProcess> {
  const file = join(fileURLToPath(new URL('.', import.meta.url)), 'worker-child.js');
  const child = spawn(process.execPath, [file, JSON.stringify(cfg)], { stdio: ['ignore', 'pipe', 'inherit'] });
  children.push(child);
  return new Promise((resolve, reject) => {
    let out = '';
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString();
      if (out.includes('ready')) resolve(child);
    });
    child.on('exit', (code) => reject(new Error(`worker exited early with ${code}`)));
  });
}

test('three workers, one SIGKILLed mid-way through 500 calls: each call answered exactly once, none run twice, none lost', { timeout: 90_000 }, async (t) => {
  const store: PostgresStore = await freshPostgres();
  const nc = await natsOrFail();
  const dir = mkdtempSync(join(tmpdir(), 'airlock-workers-'));
  const project = token('p');
  const stream = token('AIRLOCK_W_').toUpperCase();
  const durable = token('airlock-w-');
  const registrar = { name: 'registrar', ...addOperator(openWorkspace(join(dir, 'ws')).policyFile, 'registrar') };
  for (const t of testTools(project, 'ch1')) await store.upsertTool(signTool(t, registrar));
  const runsFile = join(dir, 'runs.txt');
  writeFileSync(runsFile, '');
  cleanup = async () => {
    const jsm = await nc.jetstreamManager();
    await jsm.streams.delete(stream).catch(() => undefined);
    await nc.close();
    await disposePostgres(store);
    rmSync(dir, { recursive: true, force: true });
  };
  const cfg = { nats: NATS_URL, pg: PG_URL, schema: store.schema, stream, durable, workspace: join(dir, 'ws'), runsFile, leaseMs: 1000, ackWaitMs: 2000 };
  // The first creates the stream and consumer; the other two join them.
  const first = await startWorker(cfg);
  const [, victim] = await Promise.all([startWorker(cfg), startWorker(cfg)]);
  assert.ok(victim && first);

  const subject = `cg.v1.${project}.ch1.cmd.tool.echo`;
  const wakeups = new Map<string, number>();
  const sub = nc.subscribe(`cg.v1.${project}.ch1.cmd.agent.*.wakeup`, {
    callback: (_e, m: Msg) => {
      const p = JSON.parse(new TextDecoder().decode(m.data));
      assert.ok(parseCallback(p, m.headers).ok);
      wakeups.set(p.tool_call_id, (wakeups.get(p.tool_call_id) ?? 0) + 1);
    },
  });
  const turn = `turn-${randomUUID()}`;
  let answered = 0;
  const calls = Array.from({ length: CALLS }, (_, i) =>
    callTool({ nats: nc, store, subject, tool: 'echo', agentId: 'agent-w', agentTurnId: turn, toolCallId: `call-${i}`, turnEpoch: 1, arguments: { i, delay_ms: 20 + (i % 7) * 10 }, timeoutMs: 60_000 }).then((r) => {
        answered++;
        return r;
      }),
  );
  await eventually(() => (answered >= CALLS * 0.3 ? true : undefined), 30_000, '30% of the calls answered');
  victim.kill('SIGKILL');
  const results = await Promise.all(calls);
  sub.unsubscribe();

  const byStatus: Record<string, number> = {};
  for (const r of results) {
    assert.ok(r.ok, `every call gets a valid answer: ${JSON.stringify(r)}`);
    byStatus[r.status] = (byStatus[r.status] ?? 0) + 1;
    if (r.status !== 'success') assert.equal(r.content.error?.code, 'executor_lost', JSON.stringify(r.content));
  }
  // Exactly once, by the store: one result card and one report per call.
  const counts = await store.listInbox({ agent_id: 'agent-w', limit: 10_000 });
  assert.equal(counts.length, CALLS, 'one report per call');
  assert.equal(new Set(counts.map((c) => c.tool_call_id)).size, CALLS);
  for (let i = 0; i < CALLS; i += 1) assert.equal(await store.countResultCards({ agent_turn_id: turn, tool_call_id: `call-${i}` }), 1);
  // None ran twice (runs are logged before the tool starts, so a run in the killed worker counts).
  const runs = readFileSync(runsFile, 'utf8').trim().split('\n').map((l) => l.split(' ')[1]);
  assert.equal(runs.length, new Set(runs).size, 'no call ran twice');
  // Every call that did not run is an executor_lost answer or... it ran. Lost calls never ran elsewhere.
  const lost = results.filter((r) => r.ok && r.status !== 'success').map((r) => r.toolCallId);
  const victimRuns = readFileSync(runsFile, 'utf8').trim().split('\n').filter((l) => l.startsWith(`${victim.pid} `)).map((l) => l.split(' ')[1]);
  for (const id of lost) assert.ok(victimRuns.includes(id) || !runs.includes(id), `${id}: a lost call is one the killed worker had claimed`);
  assert.ok(victimRuns.length > 0, 'the victim did some of the work before it died');
  assert.ok((byStatus.success ?? 0) >= CALLS - 16 * 2, `most calls succeed: ${JSON.stringify(byStatus)}`);
  // A diagnostic of the test (the reporter prints it as one), not a bare line on the runner's stdout.
  t.diagnostic(`outcomes ${JSON.stringify({ byStatus, victimRuns: victimRuns.length, wakeups: wakeups.size })}`);
});
