// A call's steps on the worker, in order; the agent's wakeup is handed to NATS before the call's
// log line is serialised and written (the log is not on the agent's path).
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { callTool } from '../../src/utp/client.js';
import { startHarness } from './harness.js';

test('a call goes received, claimed, ran, committed, woken, and only then is logged as answered', async () => {
  const seen: string[] = [];
  const h = await startHarness({
    db: 'sqlite',
    service: {
      onStep: (step, a) => seen.push(`${step} ${a.tool_call_id}`),
      log: (e) => {
        if (e.event === 'answered') seen.push(`log:answered ${String(e.tool_call_id)}`);
      },
    },
  });
  try {
    const r = await callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-steps', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: { x: 1 }, timeoutMs: 20_000 });
    assert.equal(r.ok && r.status, 'success', JSON.stringify(r).slice(0, 500));
    const id = r.toolCallId;
    assert.deepEqual(
      seen.filter((s) => s.endsWith(` ${id}`)).map((s) => s.split(' ')[0]),
      ['received', 'claimed', 'ran', 'committed', 'woken', 'log:answered'],
    );
  } finally {
    await h.stop();
  }
});
