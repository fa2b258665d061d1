// A worker whose event loop is blocked right after start (a busy host, a long synchronous step)
// must keep pulling: its first consumer lookup times out, and it retries instead of going deaf.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { randomUUID } from 'node:crypto';
import { test } from 'node:test';
import { callTool } from '../../src/utp/client.js';
import { startHarness } from './harness.js';

test('a worker blocked for longer than a NATS request timeout right after start still answers', async () => {
  const h = await startHarness({ db: 'sqlite' });
  try {
    spawnSync('sleep', ['7']); // the NATS client's requests time out after 5 s
    const r = await callTool({ nats: h.nc, store: h.store, subject: h.subject('sandbox.exec'), tool: 'sandbox.exec', agentId: 'agent-busy', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: { argv: ['/bin/echo', 'hi'] }, timeoutMs: 30_000 });
    assert.equal(r.ok && r.status, 'success', JSON.stringify(r).slice(0, 500));
  } finally {
    await h.stop();
  }
});
