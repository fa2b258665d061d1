import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Result } from '../../src/base/problem.js';
import { mergeIdentity, recoverIdentity } from '../../src/contracts/utp-identity.js';
import { childTraceparent, parseTraceparent } from '../../src/contracts/utp-trace.js';

const codes = (r: Result<unknown>): string[] => (r.ok ? [] : r.problems.map((p) => p.code));
const TP = '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01';
const payload = { agent_id: 'a1', agent_turn_id: 't1', turn_epoch: 2, tool_call_id: 'c1' };
const headers = { 'CG-Agent-Id': 'a1', 'CG-Turn-Id': 't1', 'CG-Turn-Epoch': '2', 'CG-Tool-Call-Id': 'c1' };

test('identity from the payload only, from the headers only, or from both agreeing', () => {
  assert.deepEqual(mergeIdentity(payload), { ok: true, value: payload });
  assert.deepEqual(mergeIdentity({}, headers), { ok: true, value: payload });
  assert.deepEqual(mergeIdentity(payload, { ...headers, 'CG-Step-Id': 's1', traceparent: TP }), {
    ok: true,
    value: { ...payload, step_id: 's1', traceparent: TP },
  });
  // Half from each side.
  assert.deepEqual(mergeIdentity({ agent_id: 'a1', turn_epoch: 2 }, { 'CG-Turn-Id': 't1', 'CG-Tool-Call-Id': 'c1' }), { ok: true, value: payload });
});

test('header names match case-insensitively; unknown headers are ignored', () => {
  assert.deepEqual(mergeIdentity({}, { 'cg-agent-id': 'a1', 'CG-TURN-ID': 't1', 'Cg-Turn-Epoch': '2', 'cg-tool-call-id': 'c1', 'Nats-Msg-Id': 'x' }), { ok: true, value: payload });
});

test('each conflicting field is named, without echoing values', () => {
  const cases: [string, Record<string, string>][] = [
    ['agent_id', { 'CG-Agent-Id': 'a2' }],
    ['agent_turn_id', { 'CG-Turn-Id': 't2' }],
    ['turn_epoch', { 'CG-Turn-Epoch': '3' }],
    ['tool_call_id', { 'CG-Tool-Call-Id': 'c2' }],
    ['step_id', { 'CG-Step-Id': 's2' }],
  ];
  for (const [fieldName, h] of cases) {
    const r = mergeIdentity({ ...payload, step_id: 's1' }, h);
    assert.ok(!r.ok, fieldName);
    assert.deepEqual(codes(r), ['UTP_IDENTITY_CONFLICT']);
    assert.equal(r.problems[0]?.path, fieldName);
    assert.match(r.problems[0]?.message ?? '', new RegExp(fieldName));
    assert.ok(!/a2|t2|c2|s2/.test(r.problems[0]?.message ?? ''));
  }
});

test('agreement is exact: no trimming, no case folding of values', () => {
  assert.deepEqual(codes(mergeIdentity(payload, { 'CG-Agent-Id': 'A1' })), ['UTP_IDENTITY_CONFLICT']);
  assert.deepEqual(codes(mergeIdentity(payload, { 'CG-Agent-Id': 'a1 ' })), ['UTP_BAD_HEADER']);
});

test('header values: epoch is canonical decimal, ids follow the id rule, one value each', () => {
  for (const e of ['02', '+2', '-1', '2.0', ' 2', '', '1e3', '99999999999999999']) {
    assert.deepEqual(codes(mergeIdentity(payload, { 'CG-Turn-Epoch': e })), ['UTP_BAD_HEADER'], e);
  }
  assert.deepEqual(codes(mergeIdentity(payload, { 'CG-Agent-Id': '' })), ['UTP_BAD_HEADER']);
  assert.deepEqual(codes(mergeIdentity(payload, { 'CG-Agent-Id': ['a1', 'a9'] })), ['UTP_BAD_HEADER']);
  assert.deepEqual(mergeIdentity(payload, { 'CG-Agent-Id': ['a1', 'a1'] }).ok, true);
  assert.deepEqual(codes(mergeIdentity(payload, { 'CG-Agent-Id': 7 })), ['UTP_BAD_HEADER']);
  assert.deepEqual(codes(mergeIdentity(payload, { 'CG-Agent-Id': 'a1', 'cg-agent-id': 'a9' })), ['UTP_BAD_HEADER']);
  assert.deepEqual(codes(mergeIdentity(payload, { traceparent: 'nope' })), ['UTP_TRACEPARENT']);
  assert.deepEqual(codes(mergeIdentity(payload, 'CG-Agent-Id: a1')), ['UTP_FIELD_TYPE']);
  assert.deepEqual(codes(mergeIdentity(payload, ['a1'])), ['UTP_FIELD_TYPE']);
});

test('a nats.js-like MsgHdrs is read through keys()/values()', () => {
  const bag = {
    keys: () => ['CG-Agent-Id', 'CG-Turn-Id', 'CG-Turn-Epoch', 'CG-Tool-Call-Id'],
    values: (k: string) => [headers[k as keyof typeof headers]],
  };
  assert.deepEqual(mergeIdentity({}, bag), { ok: true, value: payload });
  const throwing = { keys: () => { throw new Error('boom'); }, values: () => [] };
  assert.deepEqual(codes(mergeIdentity(payload, throwing)), ['UTP_FIELD_TYPE']);
});

test('missing identity (neither side) and bad payload types', () => {
  assert.deepEqual(codes(mergeIdentity({})), ['UTP_MISSING_FIELD', 'UTP_MISSING_FIELD', 'UTP_MISSING_FIELD', 'UTP_MISSING_FIELD']);
  assert.deepEqual(codes(mergeIdentity({ ...payload, turn_epoch: '2' })), ['UTP_BAD_TURN_EPOCH']);
  assert.deepEqual(codes(mergeIdentity({ ...payload, turn_epoch: '2' }, headers)), ['UTP_BAD_TURN_EPOCH']);
  assert.deepEqual(codes(mergeIdentity(null)), ['UTP_FIELD_TYPE']);
  // An inherited property is not a field.
  assert.deepEqual(codes(mergeIdentity(Object.create({ agent_id: 'a1' }) as unknown)), ['UTP_FIELD_TYPE']);
});

test('parseTraceparent: valid forms and every invalid shape', () => {
  assert.deepEqual(parseTraceparent(TP), {
    ok: true,
    value: { version: '00', traceId: '4bf92f3577b34da6a3ce929d0e0e4736', parentId: '00f067aa0ba902b7', flags: 1, sampled: true },
  });
  const future = parseTraceparent(`cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00-extra`);
  assert.ok(future.ok);
  assert.equal(future.value.sampled, false);
  for (const bad of [
    '',
    TP.toUpperCase(),
    `${TP}-x`,
    `ff${TP.slice(2)}`,
    '00-00000000000000000000000000000000-00f067aa0ba902b7-01',
    '00-4bf92f3577b34da6a3ce929d0e0e4736-0000000000000000-01',
    '00-4bf92f3577b34da6a3ce929d0e0e473-00f067aa0ba902b7-01',
    '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-1',
    `cc-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00x`,
    'x'.repeat(10_000),
  ]) {
    assert.deepEqual(codes(parseTraceparent(bad)), ['UTP_TRACEPARENT'], bad.slice(0, 60));
  }
  assert.deepEqual(codes(parseTraceparent(null)), ['UTP_TRACEPARENT']);
});

test('childTraceparent: same trace id, new non-zero span id, sampled flag kept', () => {
  const child = childTraceparent(TP);
  assert.ok(child.ok);
  const c = parseTraceparent(child.value);
  assert.ok(c.ok);
  assert.equal(c.value.traceId, '4bf92f3577b34da6a3ce929d0e0e4736');
  assert.notEqual(c.value.parentId, '00f067aa0ba902b7');
  assert.equal(c.value.sampled, true);
  assert.equal(c.value.version, '00');

  const unsampled = childTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-00');
  assert.ok(unsampled.ok);
  assert.ok(unsampled.value.endsWith('-00'));
  // Only the sampled bit survives into a version-00 child.
  const extraBits = childTraceparent('00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-ff');
  assert.ok(extraBits.ok && extraBits.value.endsWith('-01'));

  // Deterministic with an injected random source; an all-zero draw is retried.
  let calls = 0;
  const rnd = (n: number) => (calls++ === 0 ? new Uint8Array(n) : Uint8Array.from({ length: n }, (_, i) => i + 1));
  assert.deepEqual(childTraceparent(TP, rnd), { ok: true, value: '00-4bf92f3577b34da6a3ce929d0e0e4736-0102030405060708-01' });
  assert.deepEqual(codes(childTraceparent(TP, (n) => new Uint8Array(n))), ['UTP_TRACEPARENT']);
  assert.deepEqual(codes(childTraceparent('garbage')), ['UTP_TRACEPARENT']);
  const parsed = parseTraceparent(TP);
  assert.ok(parsed.ok);
  assert.ok(childTraceparent(parsed.value).ok);
});

test('recoverIdentity (answering an invalid command): a bad optional field is left out, a bad required one is not recoverable', () => {
  const ok = { ok: true, value: payload };
  assert.deepEqual(recoverIdentity({ ...payload, step_id: 42 }), ok);
  assert.deepEqual(recoverIdentity(payload, { traceparent: 'not-a-traceparent' }), ok);
  assert.deepEqual(recoverIdentity(payload, { 'cg-step-id': ' padded ' }), ok);
  assert.deepEqual(recoverIdentity({ ...payload, step_id: 's1' }, { 'CG-Step-Id': 's2' }), ok, 'a step_id conflict drops step_id only');
  assert.deepEqual(recoverIdentity({ ...payload, step_id: 's1' }, { traceparent: 'zz' }), { ok: true, value: { ...payload, step_id: 's1' } }, 'valid optional fields stay');
  assert.deepEqual(codes(recoverIdentity(payload, { 'CG-Turn-Id': 't2' })), ['UTP_IDENTITY_CONFLICT']);
  assert.deepEqual(codes(recoverIdentity({ ...payload, turn_epoch: '2' })), ['UTP_BAD_TURN_EPOCH']);
  assert.deepEqual(codes(recoverIdentity({ ...payload, agent_id: undefined })), ['UTP_MISSING_FIELD']);
  assert.deepEqual(codes(recoverIdentity(payload, { 'CG-Turn-Epoch': '02' })), ['UTP_BAD_HEADER'], 'a malformed header of a required field');
});
