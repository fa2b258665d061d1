import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Result } from '../../src/base/problem.js';
import {
  checkCallbackAgainstResultCard,
  checkCommandAgainstCallCard,
  effectiveAfterExecution,
  parseCallback,
  parseCard,
  parseToolCallContent,
  parseToolCommand,
  parseToolResultContent,
  type ToolResultContent,
} from '../../src/contracts/utp.js';

const codes = (r: Result<unknown>): string[] => (r.ok ? [] : r.problems.map((p) => p.code));
const TOOL = 'cg.v1.proj.chan.cmd.tool.sandbox';
const PMO = 'cg.v1.proj.chan.cmd.sys.pmo.internal.create_task';
const cmd = { agent_id: 'a1', agent_turn_id: 't1', turn_epoch: 0, tool_call_id: 'c1', after_execution: 'suspend', tool_call_card_id: 'card-c1' };
const pmo = { ...cmd, step_id: 's1', tool_name: 'create_task' };

test('cmd.tool command: typed value holds the known fields only', () => {
  const r = parseToolCommand(TOOL, { ...cmd, context_box_id: 'box', tool_name: 'sandbox', extra: { anything: 1 }, priority: 9 });
  assert.ok(r.ok);
  assert.deepEqual(r.value.command, { form: 'tool', ...cmd, tool_name: 'sandbox', context_box_id: 'box' });
  assert.equal(r.value.route.kind, 'tool');
  assert.deepEqual(r.value.headers, {});
});

test('cmd.tool command: every minimum field is required', () => {
  for (const k of Object.keys(cmd)) {
    const { [k]: _drop, ...rest } = cmd as Record<string, unknown>;
    const r = parseToolCommand(TOOL, rest);
    assert.deepEqual(codes(r), ['UTP_MISSING_FIELD'], k);
    assert.equal(!r.ok && r.problems[0]?.path, k);
  }
  // step_id and tool_name are optional for cmd.tool.
  assert.ok(parseToolCommand(TOOL, cmd).ok);
});

test('PMO command: step_id and tool_name are required, tool_name is the subject <tool>', () => {
  const r = parseToolCommand(PMO, pmo);
  assert.ok(r.ok);
  assert.deepEqual(r.value.command, { form: 'pmo', ...pmo });
  assert.deepEqual(codes(parseToolCommand(PMO, { ...pmo, step_id: undefined })), ['UTP_MISSING_FIELD']);
  assert.deepEqual(codes(parseToolCommand(PMO, { ...pmo, tool_name: undefined })), ['UTP_MISSING_FIELD']);
  assert.deepEqual(codes(parseToolCommand(PMO, { ...pmo, tool_name: 'other' })), ['UTP_FORM_MISMATCH']);
  // step_id may come from the header.
  const { step_id: _s, ...noStep } = pmo;
  assert.ok(parseToolCommand(PMO, noStep, { 'CG-Step-Id': 's1' }).ok);
});

test('the declared form must match the subject form; a wakeup subject carries no command', () => {
  assert.deepEqual(codes(parseToolCommand(TOOL, pmo, undefined, { form: 'pmo' })), ['UTP_FORM_MISMATCH']);
  assert.deepEqual(codes(parseToolCommand(PMO, pmo, undefined, { form: 'tool' })), ['UTP_FORM_MISMATCH']);
  assert.deepEqual(codes(parseToolCommand('cg.v1.proj.chan.cmd.agent.a1.wakeup', cmd)), ['UTP_FORM_MISMATCH']);
  assert.deepEqual(codes(parseToolCommand('cg.v1.proj.chan.cmd.tool.*', cmd)), ['UTP_SUBJECT_SYNTAX']);
});

test('inline args / arguments / result are forbidden, even when null or empty', () => {
  for (const k of ['args', 'arguments', 'result']) {
    for (const v of [null, {}, [], 'x']) assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, [k]: v })), ['UTP_INLINE_ARGS'], `${k}=${JSON.stringify(v)}`);
  }
});

test('field types: turn_epoch strict integer, ids non-empty and capped, after_execution enum', () => {
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, turn_epoch: '0' })), ['UTP_BAD_TURN_EPOCH']);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, turn_epoch: -1 })), ['UTP_BAD_TURN_EPOCH']);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, turn_epoch: 2 ** 53 })), ['UTP_BAD_TURN_EPOCH']);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, turn_epoch: Number.NaN })), ['UTP_BAD_TURN_EPOCH']);
  assert.ok(parseToolCommand(TOOL, { ...cmd, turn_epoch: 2 ** 53 - 1 }).ok);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, tool_call_card_id: '' })), ['UTP_BAD_ID']);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, tool_call_card_id: 'x'.repeat(257) })), ['UTP_BAD_ID']);
  assert.ok(parseToolCommand(TOOL, { ...cmd, tool_call_card_id: 'x'.repeat(256) }).ok);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, agent_id: 'a\n1' })), ['UTP_BAD_ID']);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, agent_id: null })), ['UTP_BAD_ID']);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, context_box_id: 5 })), ['UTP_BAD_ID']);
  assert.ok(parseToolCommand(TOOL, { ...cmd, agent_id: '代理 7' }).ok);
  assert.deepEqual(codes(parseToolCommand(TOOL, { ...cmd, after_execution: 'Suspend' })), ['UTP_BAD_AFTER_EXECUTION']);
  assert.deepEqual(codes(parseToolCommand(TOOL, 'payload')), ['UTP_FIELD_TYPE']);
});

test('every problem is reported at once, with paths', () => {
  const r = parseToolCommand('bad subject', { turn_epoch: '1', args: [] });
  assert.ok(!r.ok);
  const got = r.problems.map((p) => `${p.code}:${p.path ?? ''}`).sort();
  assert.deepEqual(got, [
    'UTP_BAD_TURN_EPOCH:turn_epoch',
    'UTP_INLINE_ARGS:args',
    'UTP_MISSING_FIELD:after_execution',
    'UTP_MISSING_FIELD:agent_id',
    'UTP_MISSING_FIELD:agent_turn_id',
    'UTP_MISSING_FIELD:tool_call_card_id',
    'UTP_MISSING_FIELD:tool_call_id',
    'UTP_SUBJECT_SYNTAX:subject',
  ]);
});

test('identity headers merge into the command; conflicts are refused', () => {
  const { agent_id: _a, turn_epoch: _e, ...rest } = cmd;
  const r = parseToolCommand(TOOL, rest, { 'CG-Agent-Id': 'a1', 'CG-Turn-Epoch': '0', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' });
  assert.ok(r.ok);
  assert.deepEqual(r.value.command, { form: 'tool', ...cmd });
  assert.deepEqual(r.value.headers, { 'CG-Agent-Id': 'a1', 'CG-Turn-Epoch': '0', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' });
  assert.deepEqual(codes(parseToolCommand(TOOL, cmd, { 'CG-Tool-Call-Id': 'c2' })), ['UTP_IDENTITY_CONFLICT']);
});

const callback = { agent_id: 'a1', agent_turn_id: 't1', turn_epoch: 0, tool_call_id: 'c1', tool_result_card_id: 'card-r1', status: 'failed', after_execution: 'terminate' };

test('callback: required fields, status enum, step_id recommended, no inline result', () => {
  assert.deepEqual(parseCallback({ ...callback, step_id: 's1', note: 'ignored' }), { ok: true, value: { ...callback, step_id: 's1' } });
  for (const k of Object.keys(callback)) {
    const { [k]: _drop, ...rest } = callback as Record<string, unknown>;
    assert.deepEqual(codes(parseCallback(rest)), ['UTP_MISSING_FIELD'], k);
  }
  for (const s of ['success', 'failed', 'canceled', 'timeout', 'partial']) assert.ok(parseCallback({ ...callback, status: s }).ok, s);
  for (const s of ['cancelled', 'ok', 'SUCCESS', '', null]) assert.deepEqual(codes(parseCallback({ ...callback, status: s })), ['UTP_BAD_STATUS']);
  assert.deepEqual(codes(parseCallback({ ...callback, result: { x: 1 } })), ['UTP_INLINE_RESULT']);
  assert.deepEqual(codes(parseCallback(callback, { 'CG-Turn-Id': 'other' })), ['UTP_IDENTITY_CONFLICT']);
  const { agent_id: _a, ...noAgent } = callback;
  assert.deepEqual(parseCallback(noAgent, { 'CG-Agent-Id': 'a1' }), { ok: true, value: callback });
});

const resultOk: ToolResultContent = { status: 'success', after_execution: 'suspend', result: { value: 42 } };

test('__cg_control.after_execution overrides when present and valid', () => {
  const withOverride = { ...resultOk, result: { value: 42, __cg_control: { after_execution: 'terminate' } } };
  const r = parseToolResultContent(withOverride);
  assert.ok(r.ok);
  assert.equal(effectiveAfterExecution(r.value), 'terminate');
  assert.equal(effectiveAfterExecution(resultOk), 'suspend');
  assert.equal(effectiveAfterExecution({ after_execution: 'terminate' }), 'terminate');
  assert.equal(effectiveAfterExecution({ after_execution: 'terminate', result: [1] }), 'terminate');
  assert.equal(effectiveAfterExecution({ after_execution: 'suspend', result: { __cg_control: {} } }), 'suspend');
  // The effective value ignores an invalid override (spec: "if present and valid")...
  assert.equal(effectiveAfterExecution({ after_execution: 'suspend', result: { __cg_control: { after_execution: 'stop' } } }), 'suspend');
  // ...and the validator refuses it.
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: { __cg_control: { after_execution: 'stop' } } })), ['UTP_CG_CONTROL']);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: { __cg_control: { after_execution: null } } })), ['UTP_CG_CONTROL']);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: { __cg_control: 'terminate' } })), ['UTP_CG_CONTROL']);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: { __cg_control: null } })), ['UTP_CG_CONTROL']);
  assert.ok(parseToolResultContent({ ...resultOk, result: { __cg_control: { other: 1 } } }).ok);
});

test('tool.result content: error required unless success, known and extensible codes, mirror', () => {
  const err = { code: 'tool_timeout', message: 'took too long' };
  assert.ok(parseToolResultContent({ status: 'timeout', after_execution: 'suspend', error: err }).ok);
  assert.ok(parseToolResultContent({ status: 'failed', after_execution: 'suspend', error: { code: 'quota_exceeded_v2', message: 'm', detail: [1, { a: null }] } }).ok);
  for (const s of ['failed', 'canceled', 'timeout', 'partial']) {
    assert.deepEqual(codes(parseToolResultContent({ status: s, after_execution: 'suspend' })), ['UTP_ERROR_MISSING'], s);
  }
  for (const code of ['Tool_Timeout', 'tool-timeout', '_x', 'x__y', '', 'x'.repeat(65), 5]) {
    assert.deepEqual(codes(parseToolResultContent({ status: 'failed', after_execution: 'suspend', error: { code, message: 'm' } })), ['UTP_ERROR_INVALID'], String(code));
  }
  assert.deepEqual(codes(parseToolResultContent({ status: 'failed', after_execution: 'suspend', error: 'boom' })), ['UTP_ERROR_INVALID']);
  assert.deepEqual(codes(parseToolResultContent({ status: 'failed', after_execution: 'suspend', error: { code: 'x' } })), ['UTP_ERROR_INVALID']);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, error: err })), ['UTP_ERROR_INVALID']);
  // Mirror: optional, must agree when present.
  const mirrored = { status: 'failed', after_execution: 'suspend', error: err, result: { error_code: 'tool_timeout', error_message: 'took too long' } };
  assert.ok(parseToolResultContent(mirrored).ok);
  assert.deepEqual(codes(parseToolResultContent({ ...mirrored, result: { error_code: 'bad_request' } })), ['UTP_ERROR_MIRROR']);
  assert.deepEqual(codes(parseToolResultContent({ ...mirrored, result: { error_message: 'other' } })), ['UTP_ERROR_MIRROR']);
  assert.deepEqual(codes(parseToolResultContent({ ...mirrored, result: { error_code: 7 } })), ['UTP_ERROR_MIRROR']);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: { error_code: 'x' } })), ['UTP_ERROR_MIRROR']);
});

test('tool.result content: result is any JSON, copied; non-JSON values are refused', () => {
  for (const result of [null, 0, 'text', [1, 'two', { three: [] }], { nested: { deep: true } }]) {
    const r = parseToolResultContent({ ...resultOk, result });
    assert.ok(r.ok);
    assert.deepEqual(r.value.result, result);
  }
  const src = { ...resultOk, result: { list: [1, 2] } };
  const r = parseToolResultContent(src);
  assert.ok(r.ok);
  assert.notEqual(r.value.result, src.result);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: Number.POSITIVE_INFINITY })), ['UTP_FIELD_TYPE']);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: { f: () => 1 } })), ['UTP_FIELD_TYPE']);
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: new Date(0) })), ['UTP_FIELD_TYPE']);
  const cyclic: Record<string, unknown> = {};
  cyclic.self = cyclic;
  assert.deepEqual(codes(parseToolResultContent({ ...resultOk, result: cyclic })), ['UTP_FIELD_TYPE']);
  // A `__proto__` key is data, not a prototype.
  const proto = JSON.parse('{"__proto__": {"polluted": true}}') as unknown;
  const p = parseToolResultContent({ ...resultOk, result: proto });
  assert.ok(p.ok);
  assert.equal(({} as Record<string, unknown>).polluted, undefined);
  assert.deepEqual(Object.keys(p.value.result as object), ['__proto__']);
});

test('tool.call content: arguments object required, optional anchors', () => {
  const content = { tool_call_id: 'c1', tool_name: 'sandbox', arguments: { code: 'print(1)' } };
  assert.deepEqual(parseToolCallContent({ ...content, step_id: 's1', agent_turn_id: 't1', trace_id: 'tr', ui: 'ignored' }), {
    ok: true,
    value: { ...content, agent_turn_id: 't1', step_id: 's1', trace_id: 'tr' },
  });
  assert.deepEqual(codes(parseToolCallContent({ ...content, arguments: [] })), ['UTP_FIELD_TYPE']);
  assert.deepEqual(codes(parseToolCallContent({ ...content, arguments: '{}' })), ['UTP_FIELD_TYPE']);
  assert.deepEqual(codes(parseToolCallContent({ tool_call_id: 'c1', tool_name: 'x' })), ['UTP_MISSING_FIELD']);
  assert.deepEqual(codes(parseToolCallContent({ ...content, tool_name: '' })), ['UTP_BAD_ID']);
});

const callCard = {
  card_id: 'card-c1',
  type: 'tool.call',
  created_at: '2025-01-31T12:00:00Z',
  content: { tool_call_id: 'c1', tool_name: 'create_task', arguments: {}, agent_turn_id: 't1', step_id: 's1' },
};
const resultCard = { card_id: 'card-r1', type: 'tool.result', created_at: '2024-02-29T23:59:60.123456789+05:30', content: { tool_call_id: 'c1', status: 'failed', after_execution: 'terminate', error: { code: 'internal_error', message: 'x' } } };

test('cards: envelope, type, timestamps, metadata self-consistency', () => {
  assert.ok(parseCard(callCard).ok);
  assert.ok(parseCard(resultCard).ok);
  assert.deepEqual(codes(parseCard({ ...callCard, type: 'tool.progress' })), ['UTP_CARD_TYPE']);
  for (const t of ['2025-01-31', '2025-01-31T12:00:00', '2025-13-01T00:00:00Z', '2023-02-29T00:00:00Z', '2025-01-31T24:00:00Z', '2025-01-31T12:00:00+25:00', 0]) {
    assert.deepEqual(codes(parseCard({ ...callCard, created_at: t })), ['UTP_BAD_TIMESTAMP'], String(t));
  }
  assert.deepEqual(codes(parseCard({ ...callCard, metadata: { step_id: 's2' } })), ['UTP_CARD_MISMATCH']);
  assert.deepEqual(codes(parseCard({ ...callCard, metadata: { trace_id: 'aaaa', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } })), ['UTP_CARD_MISMATCH']);
  assert.ok(parseCard({ ...callCard, metadata: { trace_id: '4bf92f3577b34da6a3ce929d0e0e4736', traceparent: '00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01' } }).ok);
  assert.deepEqual(codes(parseCard({ ...callCard, metadata: [] })), ['UTP_FIELD_TYPE']);
  // The content is checked by its type.
  assert.deepEqual(codes(parseCard({ ...resultCard, content: callCard.content })), ['UTP_MISSING_FIELD', 'UTP_MISSING_FIELD']);
});

test('checkCommandAgainstCallCard / checkCallbackAgainstResultCard', () => {
  const c = parseToolCommand(PMO, pmo);
  const card = parseCard(callCard);
  assert.ok(c.ok && card.ok);
  assert.ok(checkCommandAgainstCallCard(c.value.command, card.value).ok);
  assert.deepEqual(codes(checkCommandAgainstCallCard({ ...c.value.command, tool_call_id: 'c9' }, card.value)), ['UTP_CARD_MISMATCH']);
  assert.deepEqual(codes(checkCommandAgainstCallCard({ ...c.value.command, tool_call_card_id: 'other' }, card.value)), ['UTP_CARD_MISMATCH']);
  assert.deepEqual(codes(checkCommandAgainstCallCard({ ...c.value.command, agent_turn_id: 't9' }, card.value)), ['UTP_CARD_MISMATCH']);
  const rc = parseCard(resultCard);
  assert.ok(rc.ok);
  assert.deepEqual(codes(checkCommandAgainstCallCard(c.value.command, rc.value)), ['UTP_CARD_MISMATCH']);

  const cb = parseCallback(callback);
  assert.ok(cb.ok);
  assert.ok(checkCallbackAgainstResultCard(cb.value, rc.value).ok);
  assert.deepEqual(codes(checkCallbackAgainstResultCard({ ...cb.value, status: 'success' }, rc.value)), ['UTP_CARD_MISMATCH']);
  assert.deepEqual(codes(checkCallbackAgainstResultCard({ ...cb.value, after_execution: 'suspend' }, rc.value)), ['UTP_CARD_MISMATCH']);
  assert.deepEqual(codes(checkCallbackAgainstResultCard(cb.value, card.value)), ['UTP_CARD_MISMATCH']);
});
