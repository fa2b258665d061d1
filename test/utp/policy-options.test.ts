import assert from 'node:assert/strict';
import { randomUUID } from 'node:crypto';
import { chmodSync, existsSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { after, before, test } from 'node:test';
import { DEFAULT_POLICY_YAML } from '../../src/policy/policy.js';
import { callTool } from '../../src/utp/client.js';
import { checkToolRecord } from '../../src/utp/tools.js';
import { startHarness, type Harness, toolRow } from './harness.js';
import { TEST_SCOPE_ROOT, testScopeDir } from '../helpers/workspace.js';

// The host policy (the workspace's policy.yaml, as the gate uses it) bounds every UTP call, and a
// tool's options choose its lane, its own code and its declared effects. Real sandbox, real NATS.
const scope = testScopeDir('utp-scope-');
chmodSync(scope, 0o777);
writeFileSync(join(scope, 'keep.txt'), 'keep\n', { mode: 0o666 });
// The default policy lets no action act on real files: this one allows the test's scope root.
const POLICY = DEFAULT_POLICY_YAML.replace('scope_roots: []', `scope_roots: [${TEST_SCOPE_ROOT}]`);

const tool = toolRow;

let h: Harness;
before(async () => {
  h = await startHarness({
    db: 'sqlite',
    tools: (p, c) => [
      tool(p, c, 'big', { options: { runner: 'exec', limits: { memory_bytes: 8 * 1024 * 1024 * 1024 } }, parameters: { type: 'object', properties: { argv: { type: 'array', items: { type: 'string' } } } } }),
      tool(p, c, 'sum', {
        parameters: { type: 'object', properties: { x: { type: 'integer' }, y: { type: 'integer' } }, required: ['x', 'y'] },
        options: { runner: 'python', lane: 'ns', code: "import json\na = json.load(open('/in/arguments.json'))\nprint(a['x'] + a['y'])\n" },
      }),
      tool(p, c, 'stamp', {
        parameters: { type: 'object', properties: { also: { type: 'string' } } },
        options: {
          runner: 'python',
          code: `import json, sys\na = json.load(open('/in/arguments.json'))\nopen('${scope}/stamp.txt', 'w').write('stamped')\nif a.get('also'): open('${scope}/' + a['also'], 'w').write('x')\n`,
          effects: { scope: [scope], create: [`${scope}/stamp.txt`] },
        },
      }),
    ],
  });
  h.writePolicy(POLICY);
});
after(async () => {
  await h?.stop();
});

const call = (name: string, args: Record<string, unknown>) =>
  callTool({ nats: h.nc, store: h.store, subject: h.subject(name), tool: name, agentId: 'agent-p', agentTurnId: `turn-${randomUUID()}`, turnEpoch: 1, arguments: args as never, timeoutMs: 30_000 });
const result = (r: Awaited<ReturnType<typeof call>>) => (r.ok ? (r.content.result as Record<string, unknown>) : {});

test('the host policy bounds a tool: limits above it are refused (failed / auth_failed, the rule named), nothing runs', async () => {
  const r = await call('big', { argv: ['/bin/true'] });
  assert.ok(r.ok, JSON.stringify(r));
  assert.equal(r.status, 'failed');
  assert.equal(r.content.error?.code, 'auth_failed');
  assert.match(r.content.error?.message ?? '', /memory_mb/);
  assert.deepEqual((r.content.error?.detail as { problems: { code: string }[] }).problems.map((p) => p.code), ['POLICY_LIMIT']);
  assert.equal(result(r).sandbox_id, undefined, 'no sandbox ran');
});

test('the host policy picks the lane: with lanes [ns], python.run runs python3 in ns instead of Monty', async () => {
  h.writePolicy(POLICY.replace('lanes: [ns, monty]', 'lanes: [ns]'));
  try {
    const r = await call('python.run', { code: 'print(6*7)' });
    assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
    assert.equal(result(r).lane, 'ns');
    assert.equal((result(r).stdout as { text: string }).text, '42\n');
  } finally {
    h.writePolicy(POLICY);
  }
});

test('an invalid policy.yaml stops every sandboxed call (fail closed) with the problem named', async () => {
  const good = readFileSync(h.ws.policyFile, 'utf8');
  writeFileSync(h.ws.policyFile, good.replace('memory_mb: 2048', 'memory_mb: lots'));
  try {
    const r = await call('python.run', { code: 'print(1)' });
    assert.ok(r.ok);
    assert.equal(r.status, 'failed');
    assert.equal(r.content.error?.code, 'internal_error');
    assert.match(JSON.stringify(r.content.error?.detail), /POLICY_FIELD/);
  } finally {
    writeFileSync(h.ws.policyFile, good);
  }
});

test('options.code: the tool\'s own program runs, the call\'s arguments in /in/arguments.json', async () => {
  const r = await call('sum', { x: 2, y: 3 });
  assert.ok(r.ok && r.status === 'success', JSON.stringify(r));
  assert.equal((result(r).stdout as { text: string }).text, '5\n');
  assert.equal(result(r).lane, 'ns');
});

test('options.effects: a declared change in the declared scope succeeds (PROMOTE); anything more is a policy violation; the real folder never changes', async () => {
  const ok = await call('stamp', {});
  assert.ok(ok.ok && ok.status === 'success', JSON.stringify(ok));
  assert.equal((result(ok).verdict as { recommended_action: string }).recommended_action, 'PROMOTE');
  const more = await call('stamp', { also: 'sneaky.txt' });
  assert.ok(more.ok);
  assert.equal(more.status, 'failed');
  assert.equal(more.content.error?.code, 'policy_violation');
  assert.match(JSON.stringify(more.content.error?.detail), /undeclared filesystem effect: added [^"]*sneaky\.txt/);
  assert.ok(!existsSync(join(scope, 'stamp.txt')) && !existsSync(join(scope, 'sneaky.txt')), 'the run saw a copy-on-write view');
});

test('tools add refuses options that cannot hold: effects outside the scope, monty for an exec tool, code for a command tool', () => {
  const t = (options: Record<string, unknown>) => tool('proj', 'c', 'x', { options });
  const codes = (options: Record<string, unknown>) => {
    const r = checkToolRecord(t(options));
    return r.ok ? [] : r.problems.map((p) => `${p.path}: ${p.message}`);
  };
  assert.match(codes({ runner: 'python', effects: { scope: [scope], create: ['/etc/x'] } }).join('\n'), /options\.effects\.create\.0: \/etc\/x lies outside every effects\.scope folder/);
  assert.match(codes({ runner: 'exec', lane: 'monty' }).join('\n'), /only the python runner can use the monty lane/);
  assert.match(codes({ runner: 'command', argv: ['/bin/true'], code: 'x' }).join('\n'), /options\.code is only for runner "python"/);
  assert.match(codes({ runner: 'python', effects: { scope: ['/etc/ssh'] } }).join('\n'), /scope \/etc\/ssh/);
  assert.deepEqual(codes({ runner: 'python', lane: 'ns', effects: { scope: [scope], create: [`${scope}/a/**`] } }), []);
});
