import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import { openAuditLog } from '../../src/audit/index.js';
import { callTool } from '../../src/utp/client.js';
import { eventually, startHarness, toolRow, type Harness } from './harness.js';

/** A worker that stops: what it does with a call still waiting for a person. */

let h: Harness;
before(async () => {
  h = await startHarness({ db: 'sqlite', tools: (p, c) => [toolRow(p, c, 'echo.approve.slow', { options: { runner: 'echo', approval: { required: true, timeout_ms: 600_000 } } })] });
});
after(async () => {
  await h?.stop();
});

test('a stopping worker answers a call still waiting for approval at once (not run, upstream_unavailable) instead of waiting up to the approval timeout', async () => {
  const toolCallId = `call-${randomUUID()}`;
  const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('echo.approve.slow'), tool: 'echo.approve.slow', agentId: 'agent-s', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, toolCallId, arguments: { v: 1 }, timeoutMs: 30_000 });
  const approval = await eventually(async () => (await h.store.listApprovals('pending')).find((a) => a.tool_call_id === toolCallId), 8000, 'the pending approval');
  const t0 = Date.now();
  await h.service.stop();
  assert.ok(Date.now() - t0 < 5000, `stop() took ${Date.now() - t0} ms: it waited for the approval's 10 minutes`);
  const r = await pending;
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.status, 'failed');
  assert.equal(r.content.error?.code, 'upstream_unavailable', JSON.stringify(r.content.error));
  assert.match(r.content.error?.message ?? '', /worker stopped while this call waited/);
  assert.equal((await h.store.getApproval(approval.id))?.state, 'canceled', 'nobody can approve it afterwards');
  assert.ok(!h.runs.includes(toolCallId), 'the call did not run');
  assert.ok(openAuditLog(h.ws.auditFile).show().some((e) => e.type === 'refused' && e.detail?.tool_call_id === toolCallId && e.detail?.stage === 'approval'), 'the refusal is audited');
});
