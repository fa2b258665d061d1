// The worker pulls with one long-lived consume() subscription: it must still run at most
// `concurrency` calls at once (the rest wait in its pull buffer), and every call is answered once.
import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { callTool } from '../../src/utp/client.js';
import { startHarness } from './harness.js';

test('a worker runs at most `concurrency` calls at once; the calls beyond it wait and are each answered once', async () => {
  let running = 0;
  let most = 0;
  const ran: string[] = [];
  const h = await startHarness({
    db: 'sqlite',
    service: {
      concurrency: 2,
      ackWaitMs: 20_000,
      onRun: (c) => {
        ran.push(c.tool_call_id);
        running++;
        most = Math.max(most, running);
      },
      onStep: (step) => {
        if (step === 'ran') running--;
      },
    },
  });
  try {
    const calls = Array.from({ length: 6 }, () =>
      callTool({ nats: h.nc, store: h.store, subject: h.subject('echo'), tool: 'echo', agentId: 'agent-pull', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: { delay_ms: 300 }, timeoutMs: 20_000 }),
    );
    const rs = await Promise.all(calls);
    for (const r of rs) assert.equal(r.ok && r.status, 'success', JSON.stringify(r).slice(0, 500));
    assert.equal(most, 2, `at most 2 calls run at once, and 2 did (saw ${most})`);
    assert.equal(ran.length, 6);
    assert.equal(new Set(ran).size, 6, 'each call ran once');
    assert.deepEqual(new Set(ran), new Set(rs.map((r) => r.toolCallId)));
  } finally {
    await h.stop();
  }
});
