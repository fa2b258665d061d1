import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { callTool, cancelTool } from '../../src/utp/client.js';
import { startHarness, type Harness } from './harness.js';

/** The built-in tools through the whole UTP path, in the real sandbox. */

let h: Harness;
before(async () => {
  h = await startHarness({ db: 'sqlite' });
});
after(async () => {
  await h?.stop();
});

const call = (tool: string, args: Record<string, unknown>) =>
  callTool({ nats: h.nc, store: h.store, subject: h.subject(tool), tool, agentId: 'agent-b', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: args as never, timeoutMs: 30_000 });

interface Summary {
  lane: string;
  sandbox_id: string;
  verdict: { recommended_action: string };
  execution: { status: string; exit_code: number | null };
  stdout: { text: string; sha256: string };
  outputs: { path: string; sha256: string; size_bytes: number }[];
}

test('python.run: 1+1 printed, a summary of the Sandbox Result in the card', async () => {
  const r = await call('python.run', { code: 'print(1+1)' });
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.status, 'success', JSON.stringify(r.content));
  const s = r.content.result as unknown as Summary;
  assert.equal(s.stdout.text.trim(), '2');
  assert.match(s.stdout.sha256, /^[0-9a-f]{64}$/);
  assert.equal(s.execution.exit_code, 0);
  assert.ok(['PROMOTE', 'REQUIRE_CONFIRMATION'].includes(s.verdict.recommended_action));
});

test('python.run: a file written to /out is reported with its hash; an exception is failed/nonzero_exit', async () => {
  const r = await call('python.run', { code: "open('/out/r.txt','w').write('hi')\nprint('ok')" });
  assert.ok(r.ok);
  const s = r.content.result as unknown as Summary;
  if (s.lane === 'ns') {
    assert.equal(r.status, 'success', JSON.stringify(r.content));
    const out = s.outputs.find((o) => o.path === '/out/r.txt');
    assert.ok(out, JSON.stringify(s.outputs));
    assert.equal(out.sha256, '8f434346648f6b96df89dda901c5176b10a6d83961dd3c1ac88b59b2dc327aa4');
  }
  const bad = await call('python.run', { code: 'raise SystemExit(3)' });
  assert.ok(bad.ok);
  assert.equal(bad.status, 'failed');
  assert.equal(bad.content.error?.code, 'nonzero_exit');
});

test('sandbox.exec: /bin/true succeeds, /bin/false fails, a missing program ends with 127', async () => {
  const t = await call('sandbox.exec', { argv: ['/bin/true'] });
  assert.ok(t.ok && t.status === 'success', JSON.stringify(t));
  const f = await call('sandbox.exec', { argv: ['/bin/false'] });
  assert.ok(f.ok);
  assert.equal(f.status, 'failed');
  assert.equal(f.content.error?.code, 'nonzero_exit');
  assert.equal((f.content.result as unknown as Summary).execution.exit_code, 1);
  const m = await call('sandbox.exec', { argv: ['/no/such/program'] });
  assert.ok(m.ok);
  assert.equal(m.status, 'failed');
  assert.equal(m.content.error?.code, 'nonzero_exit');
  assert.equal((m.content.result as unknown as Summary).execution.exit_code, 127);
});

test('sandbox.exec tells the caller nothing of the host\'s files: a program that exists on the host but not in the sandbox answers as one that exists nowhere', async () => {
  // A host file the sandbox does not have (the host's /tmp is not the sandbox's): an agent probing
  // for keys or home folders by name must not learn which exist.
  const dir = mkdtempSync(join(tmpdir(), 'airlock-probe-'));
  const hostOnly = join(dir, 'alice.ed25519.pem');
  writeFileSync(hostOnly, 'not a key\n', { mode: 0o700 });
  try {
    const answers = [];
    for (const path of [hostOnly, join(dir, 'bob.ed25519.pem')]) {
      const r = await call('sandbox.exec', { argv: [path] });
      assert.ok(r.ok, JSON.stringify(r));
      const s = r.content.result as unknown as Summary;
      answers.push({ status: r.status, code: r.content.error?.code, exit: s.execution.exit_code, text: s.stdout.text });
    }
    assert.deepEqual(answers[0], answers[1]);
    assert.deepEqual(answers[0], { status: 'failed', code: 'nonzero_exit', exit: 127, text: '' });
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('sandbox.exec: a run over timeout_ms is killed and answers timeout / tool_timeout', async () => {
  const t0 = Date.now();
  const r = await call('sandbox.exec', { argv: ['/bin/sleep', '30'], timeout_ms: 500 });
  assert.ok(r.ok);
  assert.equal(r.status, 'timeout', JSON.stringify(r.content));
  assert.equal(r.content.error?.code, 'tool_timeout');
  assert.ok(Date.now() - t0 < 10_000, 'killed, not waited for');
  // A timeout under a second is a timeout too, not a refusal of the CPU it would imply.
  const short = await call('sandbox.exec', { argv: ['/bin/sleep', '30'], timeout_ms: 200 });
  assert.ok(short.ok, JSON.stringify(short));
  assert.equal(short.status, 'timeout', JSON.stringify(short.content));
});

test('sandbox.exec: a cancel while the sandbox runs kills it and answers canceled promptly', async () => {
  const agentTurnId = `turn-${randomUUID()}`;
  const toolCallId = `call-${randomUUID()}`;
  const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('sandbox.exec'), tool: 'sandbox.exec', agentId: 'agent-b', agentTurnId, turnEpoch: 1, toolCallId, arguments: { argv: ['/bin/sleep', '30'] } as never, timeoutMs: 30_000 });
  await new Promise((r) => setTimeout(r, 1000)); // inside the sandbox run
  const t0 = Date.now();
  assert.deepEqual(await cancelTool({ nats: h.nc, subject: h.subject('sandbox.exec'), agentId: 'agent-b', agentTurnId, turnEpoch: 1, toolCallId }), []);
  const r = await pending;
  assert.ok(r.ok);
  assert.equal(r.status, 'canceled', JSON.stringify(r.content));
  assert.ok(Date.now() - t0 < 5000, 'the sandbox was killed, not waited for (its sleep is 30 s)');
});

test('python.run: a cancel kills a Monty-lane run (an endless loop) and answers canceled long before its 30 s wall limit', async () => {
  const agentTurnId = `turn-${randomUUID()}`;
  const toolCallId = `call-${randomUUID()}`;
  const pending = callTool({ nats: h.nc, store: h.store, subject: h.subject('python.run'), tool: 'python.run', agentId: 'agent-b', agentTurnId, turnEpoch: 1, toolCallId, arguments: { code: 'while True:\n    pass', timeout_ms: 30_000 } as never, timeoutMs: 40_000 });
  for (let i = 0; i < 200 && !h.runs.includes(toolCallId); i++) await new Promise((r) => setTimeout(r, 25));
  await new Promise((r) => setTimeout(r, 1000)); // inside the loop
  const t0 = Date.now();
  assert.deepEqual(await cancelTool({ nats: h.nc, subject: h.subject('python.run'), agentId: 'agent-b', agentTurnId, turnEpoch: 1, toolCallId }), []);
  const r = await pending;
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.status, 'canceled', JSON.stringify(r.content));
  const s = r.content.result as unknown as Summary;
  assert.equal(s.lane, 'monty', 'python.run used the Monty lane (the default when @pydantic/monty loads)');
  assert.equal(s.execution.status, 'POLICY_ABORTED', 'the host killed the run');
  assert.ok(Date.now() - t0 < 5000, `answered ${Date.now() - t0} ms after the cancel: the Monty child was killed, not waited for`);
});
