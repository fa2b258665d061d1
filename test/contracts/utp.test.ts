import assert from 'node:assert/strict';
import { readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import fc from 'fast-check';
import { z } from 'zod';
import { checkText } from '../../src/contracts/index.js';
import { jsonRules } from '../../src/contracts/json-doc.js';
import type { Result } from '../../src/base/problem.js';
import { textRules } from '../../src/contracts/text.js';
import { parseCallback, parseCard, parseToolCommand, utpContract, type UtpDocument } from '../../src/contracts/utp.js';
import { repoPath } from '../helpers/paths.js';

const codes = (r: Result<unknown>): string[] => (r.ok ? [] : r.problems.map((p) => p.code));
const examplesDir = repoPath('examples/utp');
const examples = readdirSync(examplesDir)
  .filter((f) => f.endsWith('.json'))
  .map((f) => ({ name: f, text: readFileSync(join(examplesDir, f), 'utf8') }));
const knownCodes = new Set([...utpContract.rules, ...jsonRules, ...textRules].map((r) => r.code));

test('there is a valid example of each document kind', () => {
  const kinds = new Set<string>();
  for (const e of examples) {
    const r = utpContract.parse(e.text);
    assert.ok(r.ok, `${e.name}: ${JSON.stringify(codes(r))}`);
    kinds.add(r.value.utp === 'card' ? `card:${r.value.card.type}` : r.value.utp);
  }
  assert.deepEqual([...kinds].sort(), ['callback', 'card:tool.call', 'card:tool.result', 'pmo_command', 'tool_command']);
});

test('detect: .json with a top-level utp key only', () => {
  const text = examples[0]?.text ?? '';
  assert.equal(utpContract.detect('x.json', text), true);
  assert.equal(utpContract.detect('X.JSON', text), true);
  assert.equal(utpContract.detect('x.md', text), false);
  assert.equal(utpContract.detect('x.json', '{"payload": {"utp": "card"}}'), false);
  assert.equal(utpContract.detect('x.json', '[{"utp": "card"}]'), false);
  assert.equal(utpContract.detect('x.json', '{"utp": "card", '), true);
  assert.equal(checkText('x.json', '{"utp": "card", ').problems[0]?.code, 'JSON_SYNTAX');
});

test('render is stable pretty JSON and parse(render(x)) deep-equals x for every example', () => {
  for (const e of examples) {
    const r = utpContract.parse(e.text);
    assert.ok(r.ok);
    const text = utpContract.render(r.value);
    assert.ok(text.endsWith('}\n'));
    assert.deepEqual(utpContract.parse(text), { ok: true, value: r.value }, e.name);
    assert.equal(utpContract.render((utpContract.parse(text) as { value: UtpDocument }).value), text, `${e.name}: render is a fixed point`);
  }
});

test('unknown payload fields and unknown headers are dropped from the typed value', () => {
  const doc = {
    utp: 'tool_command',
    subject: 'cg.v1.p.c.cmd.tool.x',
    headers: { 'X-Other': 'y', 'CG-Agent-Id': 'a1' },
    payload: { agent_id: 'a1', agent_turn_id: 't', turn_epoch: 1, tool_call_id: 'c', after_execution: 'suspend', tool_call_card_id: 'k', future_field: [1] },
  };
  const r = utpContract.parse(JSON.stringify(doc));
  assert.ok(r.ok);
  const rendered = JSON.parse(utpContract.render(r.value)) as typeof doc;
  assert.deepEqual(rendered.headers, { 'CG-Agent-Id': 'a1' });
  assert.equal('future_field' in rendered.payload, false);
});

test('problems carry the line of the offending field and its path', () => {
  const text = ['{', '  "utp": "callback",', '  "payload": {', '    "agent_id": "a",', '    "agent_turn_id": "t",', '    "turn_epoch": "1",', '    "tool_call_id": "c",', '    "tool_result_card_id": "r",', '    "status": "done",', '    "after_execution": "suspend"', '  }', '}'].join('\r\n');
  const r = utpContract.parse(`\ufeff${text}`);
  assert.ok(!r.ok);
  assert.deepEqual(
    r.problems.map((p) => [p.code, p.line, p.path]),
    [
      ['UTP_BAD_TURN_EPOCH', 6, 'payload.turn_epoch'],
      ['UTP_BAD_STATUS', 9, 'payload.status'],
    ],
  );
});

test('hostile text: duplicate keys, deep nesting, huge, binary, empty, non-object', () => {
  const dup = '{"utp":"callback","payload":{"status":"success","status":"failed"}}';
  assert.deepEqual(codes(utpContract.parse(dup)), ['JSON_DUPLICATE_KEY']);
  const deep = `{"utp":"card","card":${'['.repeat(5000)}${']'.repeat(5000)}}`;
  assert.deepEqual(codes(utpContract.parse(deep)), ['JSON_TOO_DEEP']);
  assert.deepEqual(codes(utpContract.parse(`{"utp":"card","card":"${'x'.repeat(1024 * 1024 + 10)}"}`)), ['DOC_TOO_LARGE']);
  assert.deepEqual(codes(utpContract.parse('\u0000\u0001\u00ff')), ['JSON_SYNTAX']);
  assert.deepEqual(codes(utpContract.parse('')), ['JSON_SYNTAX']);
  assert.deepEqual(codes(utpContract.parse('[]')), ['UTP_DOC_SHAPE']);
  assert.deepEqual(codes(utpContract.parse('{"utp": 1}')), ['UTP_DOC_SHAPE']);
  assert.deepEqual(codes(utpContract.parse('{"utp": "card", "card": {"__proto__": {"card_id": "x"}}}')), [
    'UTP_MISSING_FIELD',
    'UTP_MISSING_FIELD',
    'UTP_MISSING_FIELD',
    'UTP_MISSING_FIELD',
  ]);
});

test('messages never echo field values', () => {
  const secret = 'sk-proj-ABCDEFGHIJKLMNOPQRSTUVWXYZ012345';
  const doc = {
    utp: 'tool_command',
    subject: `cg.v1.p.c.cmd.tool.${secret}!`,
    headers: { 'CG-Agent-Id': secret, 'CG-Turn-Epoch': secret, traceparent: secret },
    payload: { agent_id: `${secret}x`, agent_turn_id: ` ${secret}`, turn_epoch: secret, tool_call_id: 5, after_execution: secret, tool_call_card_id: '', args: secret },
  };
  const r = utpContract.parse(JSON.stringify(doc));
  assert.ok(!r.ok);
  assert.ok(r.problems.length >= 6);
  for (const p of r.problems) assert.ok(!p.message.includes('ABCDEFGHIJ'), p.message);
});

test('schemas: every payload schema publishes as JSON Schema and accepts the examples', () => {
  assert.deepEqual(Object.keys(utpContract.schemas).sort(), [
    'utp.callback',
    'utp.card',
    'utp.document',
    'utp.pmo-command',
    'utp.tool-call-content',
    'utp.tool-command',
    'utp.tool-result-content',
  ]);
  for (const [name, schema] of Object.entries(utpContract.schemas)) {
    const js = z.toJSONSchema(schema) as Record<string, unknown>;
    assert.ok(JSON.stringify(js).length > 50, name);
  }
  const s = utpContract.schemas;
  for (const e of examples) {
    const data = JSON.parse(e.text) as Record<string, unknown>;
    assert.ok(s['utp.document']?.safeParse(data).success, `${e.name} vs utp.document`);
    if (data.utp === 'pmo_command') assert.ok(s['utp.pmo-command']?.safeParse(data.payload).success);
    if (data.utp === 'callback') assert.ok(s['utp.callback']?.safeParse(data.payload).success);
    if (data.utp === 'card') assert.ok(s['utp.card']?.safeParse(data.card).success, e.name);
  }
  // The schemas refuse what the parsers refuse for the simple cases.
  const cmd = { agent_id: 'a', agent_turn_id: 't', turn_epoch: 1, tool_call_id: 'c', after_execution: 'suspend', tool_call_card_id: 'k' };
  assert.ok(s['utp.tool-command']?.safeParse(cmd).success);
  for (const bad of [{ ...cmd, arguments: {} }, { ...cmd, turn_epoch: '1' }, { ...cmd, agent_id: '' }, { ...cmd, after_execution: 'x' }]) {
    assert.equal(s['utp.tool-command']?.safeParse(bad).success, false, JSON.stringify(bad));
  }
  assert.equal(s['utp.tool-result-content']?.safeParse({ status: 'failed', after_execution: 'suspend' }).success, false);
  assert.equal(s['utp.tool-result-content']?.safeParse({ status: 'success', after_execution: 'suspend', error: { code: 'x', message: 'y' } }).success, false);
  assert.equal(s['utp.callback']?.safeParse({ ...cmd, tool_result_card_id: 'r', status: 'success', result: 1 }).success, false);
});

// ---- property tests ---------------------------------------------------------------------------

const id = fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9 ._:-]{0,30}[A-Za-z0-9]$/);
const token = fc.stringMatching(/^[A-Za-z0-9_-]{1,12}$/);
const after = fc.constantFrom('suspend', 'terminate');
const status = fc.constantFrom('success', 'failed', 'canceled', 'timeout', 'partial');
const epoch = fc.nat();
const json = fc.jsonValue({ maxDepth: 4 });
const traceparent = fc
  .tuple(fc.stringMatching(/^[0-9a-f]{32}$/), fc.stringMatching(/^[0-9a-f]{16}$/), fc.constantFrom('00', '01'))
  .filter(([t, p]) => !/^0+$/.test(t) && !/^0+$/.test(p))
  .map(([t, p, f]) => `00-${t}-${p}-${f}`);
const opt = <T>(a: fc.Arbitrary<T>) => fc.option(a, { nil: undefined });
const clean = (o: Record<string, unknown>) => JSON.parse(JSON.stringify(o)) as Record<string, unknown>;

const commandDoc = fc
  .record({
    pmo: fc.boolean(),
    ver: fc.nat(9).map((n) => `v${n}`),
    project: token,
    channel: token,
    target: token,
    rest: fc.array(token, { maxLength: 3 }),
    agent_id: id,
    agent_turn_id: id,
    turn_epoch: epoch,
    tool_call_id: id,
    step_id: id,
    after_execution: after,
    tool_call_card_id: id,
    context_box_id: opt(id),
    withTool: fc.boolean(),
    inHeaders: fc.array(fc.constantFrom('agent_id', 'agent_turn_id', 'turn_epoch', 'tool_call_id', 'step_id')),
    traceparent: opt(traceparent),
    extra: opt(json),
  })
  .map((g) => {
    const subject = g.pmo ? `cg.${g.ver}.${g.project}.${g.channel}.cmd.sys.pmo.internal.${g.target}` : ['cg', g.ver, g.project, g.channel, 'cmd', 'tool', g.target, ...g.rest].join('.');
    const payload: Record<string, unknown> = {
      agent_id: g.agent_id,
      agent_turn_id: g.agent_turn_id,
      turn_epoch: g.turn_epoch,
      tool_call_id: g.tool_call_id,
      step_id: g.pmo || g.withTool ? g.step_id : undefined,
      tool_name: g.pmo || g.withTool ? g.target : undefined,
      after_execution: g.after_execution,
      tool_call_card_id: g.tool_call_card_id,
      context_box_id: g.context_box_id,
      x_extra: g.extra,
    };
    const names: Record<string, string> = { agent_id: 'CG-Agent-Id', agent_turn_id: 'CG-Turn-Id', turn_epoch: 'CG-Turn-Epoch', tool_call_id: 'CG-Tool-Call-Id', step_id: 'CG-Step-Id' };
    const headers: Record<string, string> = {};
    for (const f of g.inHeaders) {
      if (payload[f] === undefined) continue;
      headers[names[f] as string] = String(payload[f]);
      delete payload[f]; // identity carried by the header only
    }
    if (g.traceparent) headers.traceparent = g.traceparent;
    return clean({ utp: g.pmo ? 'pmo_command' : 'tool_command', subject, headers, payload });
  });

const callbackDoc = fc
  .record({
    agent_id: id,
    agent_turn_id: id,
    turn_epoch: epoch,
    tool_call_id: id,
    tool_result_card_id: id,
    status,
    after_execution: after,
    step_id: opt(id),
    wake: fc.boolean(),
    target: token,
  })
  .map(({ wake, target, ...payload }) =>
    clean({ utp: 'callback', ...(wake ? { wakeup_subject: `cg.v1.p.c.cmd.agent.${target}.wakeup` } : {}), headers: { 'CG-Turn-Id': payload.agent_turn_id }, payload }),
  );

const errorCode = fc.stringMatching(/^[a-z][a-z0-9]{0,8}(_[a-z0-9]{1,8}){0,3}$/);
const cardDoc = fc
  .record({
    card_id: id,
    call: fc.boolean(),
    created_at: fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2999-12-31T23:59:59Z'), noInvalidDate: true }).map((d) => d.toISOString()),
    tool_call_id: id,
    tool_name: id,
    args: fc.dictionary(fc.string({ maxLength: 8 }), json, { maxKeys: 4 }),
    status,
    after_execution: after,
    result: opt(json),
    control: opt(after),
    mirror: fc.boolean(),
    code: errorCode,
    message: id,
    detail: opt(json),
    step_id: opt(id),
  })
  .map((g) => {
    if (g.call) {
      const content = { tool_call_id: g.tool_call_id, tool_name: g.tool_name, arguments: g.args, step_id: g.step_id };
      return clean({ utp: 'card', card: { card_id: g.card_id, type: 'tool.call', created_at: g.created_at, content, metadata: { step_id: g.step_id } } });
    }
    const failed = g.status !== 'success';
    let result: unknown = g.result;
    if (g.control || (failed && g.mirror)) {
      result = { value: g.result ?? null, ...(g.control ? { __cg_control: { after_execution: g.control } } : {}), ...(failed && g.mirror ? { error_code: g.code, error_message: g.message } : {}) };
    }
    const content = { status: g.status, after_execution: g.after_execution, result, error: failed ? { code: g.code, message: g.message, detail: g.detail } : undefined };
    return clean({ utp: 'card', card: { card_id: g.card_id, type: 'tool.result', created_at: g.created_at, content } });
  });

const anyDoc = fc.oneof(commandDoc, callbackDoc, cardDoc);

test('property: generated valid documents parse, and parse(render(x)) deep-equals x', () => {
  fc.assert(
    fc.property(anyDoc, (doc) => {
      const r = utpContract.parse(JSON.stringify(doc));
      if (!r.ok) throw new Error(`${JSON.stringify(r.problems)} for ${JSON.stringify(doc)}`);
      assert.deepEqual(utpContract.parse(utpContract.render(r.value)), { ok: true, value: r.value });
      // The published schema agrees on valid documents whose identity is all in the payload.
      const payload = doc.payload as Record<string, unknown> | undefined;
      if (!payload || ('agent_id' in payload && 'agent_turn_id' in payload && 'turn_epoch' in payload && 'tool_call_id' in payload && (doc.utp !== 'pmo_command' || 'step_id' in payload))) {
        assert.ok(utpContract.schemas['utp.document']?.safeParse(doc).success, JSON.stringify(doc));
      }
    }),
    { numRuns: 300 },
  );
});

/** Replaces, deletes or adds one value somewhere in a JSON document. */
function mutate(doc: unknown, path: number[], op: number, value: unknown): unknown {
  if (doc === null || typeof doc !== 'object') return op % 3 === 0 ? value : doc;
  const copy: Record<string, unknown> | unknown[] = Array.isArray(doc) ? [...doc] : { ...(doc as Record<string, unknown>) };
  const keys = Object.keys(copy);
  if (keys.length === 0 || path.length === 0) {
    if (op % 3 === 1 && !Array.isArray(copy)) (copy as Record<string, unknown>)[['result', 'args', '__cg_control', 'error', 'utp', 'step_id'][op % 6] as string] = value;
    return op % 3 === 0 ? value : copy;
  }
  const k = keys[(path[0] as number) % keys.length] as string;
  if (path.length === 1 && op % 3 === 2) delete (copy as Record<string, unknown>)[k];
  else (copy as Record<string, unknown>)[k] = mutate((copy as Record<string, unknown>)[k], path.slice(1), op, value);
  return copy;
}

test('property: mutated documents never throw and only report known codes with messages', () => {
  fc.assert(
    fc.property(anyDoc, fc.array(fc.nat(20), { maxLength: 5 }), fc.nat(), fc.oneof(json, fc.anything()), (doc, path, op, value) => {
      const mutated = mutate(doc, path, op, value);
      let text: string;
      try {
        text = JSON.stringify(mutated) ?? 'null';
      } catch {
        return; // not representable as JSON (BigInt)
      }
      const r = utpContract.parse(text);
      if (r.ok) {
        assert.deepEqual(utpContract.parse(utpContract.render(r.value)), { ok: true, value: r.value });
        return;
      }
      for (const p of r.problems) {
        assert.ok(knownCodes.has(p.code), p.code);
        assert.equal(typeof p.message, 'string');
        assert.ok(p.message.length > 0);
      }
    }),
    { numRuns: 500 },
  );
});

test('property: the direct parsers never throw on arbitrary values', () => {
  fc.assert(
    fc.property(fc.anything(), fc.anything(), fc.anything(), (a, b, c) => {
      for (const r of [parseToolCommand(a, b, c), parseCallback(b, c), parseCard(a), parseToolCommand('cg.v1.p.c.cmd.tool.x', b, c)]) {
        if (!r.ok) for (const p of r.problems) assert.ok(knownCodes.has(p.code), p.code);
      }
    }),
    { numRuns: 500 },
  );
});

test('property: arbitrary strings never throw in detect, parse or checkText', () => {
  fc.assert(
    fc.property(fc.oneof(fc.string({ unit: 'binary', maxLength: 200 }), fc.json(), fc.jsonValue().map((v) => JSON.stringify({ utp: 'card', card: v }))), (text) => {
      utpContract.detect('f.json', text);
      const r = utpContract.parse(text);
      if (!r.ok) for (const p of r.problems) assert.ok(knownCodes.has(p.code), p.code);
      checkText('f.json', text);
    }),
    { numRuns: 500 },
  );
});
