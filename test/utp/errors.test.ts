import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { after, before, test } from 'node:test';
import type { Store } from '../../src/store/types.js';
import { callTool } from '../../src/utp/client.js';
import { BUILTIN_TOOLS, defaultToolSubject } from '../../src/utp/tools.js';
import { startHarness, type Harness } from './harness.js';

/**
 * The error codes a caller gets when the fault is not theirs: `upstream_unavailable` (the sandbox
 * cannot run the action here) and `internal_error` (Airlock failed), each from a real call.
 * (execute.ts's other two sources of these codes cannot be reached on a host where Monty loads:
 * see docs/utp-service.md, "What the answer looks like".)
 */

let h: Harness;
// While true, the store fails when asked to record an approval (the store went away mid-call).
let failApprovals = false;
before(async () => {
  h = await startHarness({
    db: 'sqlite',
    tools: (project, channel) => {
      const row = (name: string, options: unknown) => ({ project_id: project, tool_name: name, target_subject: defaultToolSubject('v1', project, channel, name), description: name, parameters: BUILTIN_TOOLS.echo!.parameters, options: options as never, after_execution: 'suspend' as const });
      return [
        // The ns sandbox needs 2 pids (its init and the program): it cannot start this tool's runs.
        row('true.onepid', { runner: 'command', argv: ['/bin/true'], limits: { pids: 1 } }),
        // A row another program wrote past `airlock tools add`'s checks: no runner Airlock knows.
        row('broken.options', { runner: 'teleport' }),
      ];
    },
    store: (s: Store) =>
      new Proxy(s, {
        get(target, prop, recv) {
          if (prop === 'createApproval' && failApprovals) return async () => Promise.reject(new Error('connection terminated unexpectedly (simulated)'));
          const v = Reflect.get(target, prop, recv);
          return typeof v === 'function' ? v.bind(target) : v;
        },
      }),
  });
});
after(async () => {
  await h?.stop();
});

const call = (tool: string, args: Record<string, unknown> = {}) =>
  callTool({ nats: h.nc, store: h.store, subject: h.subject(tool), tool, agentId: 'agent-e', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: args as never, timeoutMs: 15_000 });

test('upstream_unavailable: the sandbox cannot start the run (SANDBOX_ERROR), the call is answered failed, once', async () => {
  const r = await call('true.onepid');
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.status, 'failed');
  assert.equal(r.content.error?.code, 'upstream_unavailable', JSON.stringify(r.content.error));
  assert.equal((r.content.error?.detail as { execution_status?: string }).execution_status, 'SANDBOX_ERROR');
  assert.equal((r.content.result as { error_code?: string }).error_code, 'upstream_unavailable', 'mirrored in result');
  const anchor = { agent_turn_id: r.callback.agent_turn_id, tool_call_id: r.toolCallId };
  assert.equal((await h.store.listInbox({ anchor })).length, 1);
});

test('internal_error: the store fails in the middle of a call (recording its approval): answered, and logged call-crashed', async () => {
  failApprovals = true;
  try {
    const r = await call('echo.approve', { v: 1 });
    assert.ok(r.ok, JSON.stringify(r));
    assert.equal(r.status, 'failed');
    assert.equal(r.content.error?.code, 'internal_error');
    assert.ok(!h.runs.includes(r.toolCallId), 'the tool did not run');
    const crashed = h.logs.find((l) => l.event === 'call-crashed' && l.tool_call_id === r.toolCallId);
    assert.match(String(crashed?.error), /connection terminated unexpectedly/);
  } finally {
    failApprovals = false;
  }
});

test('internal_error: a registry row whose options Airlock cannot read', async () => {
  const r = await call('broken.options');
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.status, 'failed');
  assert.equal(r.content.error?.code, 'internal_error');
  assert.match(r.content.error?.message ?? '', /invalid options in the registry/);
  assert.ok(!h.runs.includes(r.toolCallId));
});

test('internal_error: an answer that breaks Airlock\'s own result contract is replaced by an honest internal_error', async () => {
  // echo nests the arguments one level down in `result`: arguments 64 objects deep (the most the
  // tool.call card may hold, MAX_JSON_DEPTH) make a result one level too deep for the contract.
  let deep: Record<string, unknown> = { leaf: 1 };
  for (let i = 0; i < 63; i++) deep = { d: deep };
  const r = await call('echo', deep);
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.status, 'failed');
  assert.equal(r.content.error?.code, 'internal_error');
  assert.ok(h.logs.some((l) => l.event === 'result-self-check-failed' && l.tool_call_id === r.toolCallId));
});
