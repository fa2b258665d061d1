// policy.yaml's tool_registrations: the pin of each UTP tool's oldest registration (src/policy/policy.ts).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { DEFAULT_POLICY_YAML, parsePolicy } from '../../src/policy/policy.js';

test('tool_registrations pins a tool by `<project>/<tool>` to an ISO time; anything else is POLICY_FIELD at its line', () => {
  const ok = parsePolicy(`${DEFAULT_POLICY_YAML}tool_registrations: { "demo/echo": "2026-11-27T12:00:00.000Z" }\n`);
  assert.ok(ok.ok, JSON.stringify(ok));
  assert.deepEqual(ok.value.tool_registrations, { 'demo/echo': '2026-11-27T12:00:00.000Z' });
  assert.ok(parsePolicy(DEFAULT_POLICY_YAML).ok && (parsePolicy(DEFAULT_POLICY_YAML) as { value: { tool_registrations: object } }).value.tool_registrations, 'absent: no pin');
  const lines = DEFAULT_POLICY_YAML.split('\n').length;
  for (const [yaml, field] of [
    ['tool_registrations:\n  echo: "2026-11-27T12:00:00.000Z"\n', 'tool_registrations.echo'],
    ['tool_registrations:\n  "demo/echo": "last tuesday"\n', 'tool_registrations.demo/echo'],
  ] as const) {
    const r = parsePolicy(DEFAULT_POLICY_YAML + yaml);
    assert.ok(!r.ok);
    assert.deepEqual(r.problems.map((p) => [p.code, p.path, p.line]), [['POLICY_FIELD', field, lines + 1]], JSON.stringify(r.problems));
  }
});
