import assert from 'node:assert/strict';
import { test } from 'node:test';
import type { Result } from '../../src/base/problem.js';
import { buildPmoSubject, buildSubject, buildToolSubject, buildWakeupSubject, parseSubject } from '../../src/contracts/utp-subject.js';

const codes = (r: Result<unknown>): string[] => (r.ok ? [] : r.problems.map((p) => p.code));

test('tool subject: target and the extra tokens', () => {
  assert.deepEqual(parseSubject('cg.v1.proj.chan.cmd.tool.sandbox'), {
    ok: true,
    value: { ver: 'v1', projectId: 'proj', channelId: 'chan', kind: 'tool', target: 'sandbox', rest: [] },
  });
  const r = parseSubject('cg.v1r3.p-1.c_2.cmd.tool.sandbox.python.run');
  assert.ok(r.ok);
  assert.equal(r.value.target, 'sandbox');
  assert.deepEqual(r.value.rest, ['python', 'run']);
});

test('pmo subject: exactly one <tool> token', () => {
  const r = parseSubject('cg.v1.proj.chan.cmd.sys.pmo.internal.create_task');
  assert.ok(r.ok);
  assert.equal(r.value.kind, 'pmo');
  assert.equal(r.value.target, 'create_task');
  assert.deepEqual(codes(parseSubject('cg.v1.proj.chan.cmd.sys.pmo.internal')), ['UTP_SUBJECT_FORM']);
  assert.deepEqual(codes(parseSubject('cg.v1.proj.chan.cmd.sys.pmo.internal.a.b')), ['UTP_SUBJECT_FORM']);
  assert.deepEqual(codes(parseSubject('cg.v1.proj.chan.cmd.sys.other.internal.a')), ['UTP_SUBJECT_FORM']);
});

test('wakeup subject: cmd.agent.<target>.wakeup and nothing else', () => {
  const r = parseSubject('cg.v1.proj.chan.cmd.agent.agent-7.wakeup');
  assert.ok(r.ok);
  assert.equal(r.value.kind, 'wakeup');
  assert.equal(r.value.target, 'agent-7');
  assert.deepEqual(codes(parseSubject('cg.v1.proj.chan.cmd.agent.agent-7')), ['UTP_SUBJECT_FORM']);
  assert.deepEqual(codes(parseSubject('cg.v1.proj.chan.cmd.agent.agent-7.wakeup.now')), ['UTP_SUBJECT_FORM']);
  assert.deepEqual(codes(parseSubject('cg.v1.proj.chan.cmd.agent.wakeup')), ['UTP_SUBJECT_FORM']);
});

test('NATS token rules: empty tokens, whitespace, wildcards, non-ASCII, punctuation, length', () => {
  for (const bad of [
    '',
    '.cg.v1.p.c.cmd.tool.x',
    'cg.v1.p.c.cmd.tool.x.',
    'cg.v1.p..cmd.tool.x',
    'cg.v1.p.c.cmd.tool.x y',
    'cg.v1.p.c.cmd.tool.x\ty',
    'cg.v1.p.c.cmd.tool.*',
    'cg.v1.p.c.cmd.tool.>',
    'cg.v1.*.c.cmd.tool.x',
    'cg.v1.p.c.cmd.tool.x>',
    'cg.v1.p.c.cmd.tool.wéb',
    'cg.v1.p.c.cmd.tool.$sys',
    'cg.v1.p.c.cmd.tool.a/b',
    'cg.v1.p.c.cmd.tool.a\u0000b',
    `cg.v1.p.c.cmd.tool.${'x'.repeat(129)}`,
    `cg.v1.p.c.cmd.tool.${'x.'.repeat(300)}y`,
  ]) {
    assert.deepEqual(codes(parseSubject(bad)).slice(0, 1), ['UTP_SUBJECT_SYNTAX'], JSON.stringify(bad.slice(0, 40)));
  }
  assert.deepEqual(codes(parseSubject(42)), ['UTP_FIELD_TYPE']);
});

test('structure: cg prefix, version token, cmd token, a known area', () => {
  for (const bad of ['nats.v1.p.c.cmd.tool.x', 'cg.1.p.c.cmd.tool.x', 'cg.version.p.c.cmd.tool.x', 'cg.v1.p.c.evt.tool.x', 'cg.v1.p.c.cmd.tools.x', 'cg.v1.p.c.cmd', 'cg.v1.p', 'cg.v1.p.c.cmd.tool']) {
    assert.deepEqual(codes(parseSubject(bad)), ['UTP_SUBJECT_FORM'], bad);
  }
});

test('problem messages never echo the subject', () => {
  const hostile = 'cg.v1.p.c.cmd.tool.sk-live-SECRET value';
  const r = parseSubject(hostile);
  assert.ok(!r.ok);
  for (const p of r.problems) assert.ok(!p.message.includes('SECRET'));
});

test('build* renders each form and parses back to the same route', () => {
  const base = { ver: 'v1', projectId: 'proj', channelId: 'chan' };
  const tool = buildToolSubject({ ...base, target: 'sandbox', rest: ['python'] });
  assert.deepEqual(tool, { ok: true, value: 'cg.v1.proj.chan.cmd.tool.sandbox.python' });
  assert.deepEqual(buildPmoSubject({ ...base, tool: 'create_task' }), { ok: true, value: 'cg.v1.proj.chan.cmd.sys.pmo.internal.create_task' });
  assert.deepEqual(buildWakeupSubject({ ...base, target: 'agent-7' }), { ok: true, value: 'cg.v1.proj.chan.cmd.agent.agent-7.wakeup' });
  for (const s of ['cg.v1.proj.chan.cmd.tool.a.b.c', 'cg.v2.p.c.cmd.sys.pmo.internal.t', 'cg.v1.p.c.cmd.agent.x.wakeup']) {
    const r = parseSubject(s);
    assert.ok(r.ok);
    assert.deepEqual(buildSubject(r.value), { ok: true, value: s });
  }
});

test('build* refuses tokens that are not single valid tokens', () => {
  const base = { ver: 'v1', projectId: 'proj', channelId: 'chan' };
  assert.deepEqual(codes(buildToolSubject({ ...base, target: 'a.b' })), ['UTP_SUBJECT_SYNTAX']);
  assert.deepEqual(codes(buildToolSubject({ ...base, projectId: 'p.q', target: 'a' })), ['UTP_SUBJECT_SYNTAX']);
  assert.deepEqual(codes(buildPmoSubject({ ...base, tool: '*' })), ['UTP_SUBJECT_SYNTAX']);
  assert.deepEqual(codes(buildWakeupSubject({ ...base, target: '' })), ['UTP_SUBJECT_SYNTAX']);
  assert.deepEqual(codes(buildSubject({ ...base, kind: 'pmo', target: 't', rest: ['x'] })), ['UTP_SUBJECT_FORM']);
  assert.deepEqual(codes(buildToolSubject({ ...base, ver: '1', target: 'a' })), ['UTP_SUBJECT_FORM']);
});

test('the one-pass check of a valid subject agrees with the token-by-token rules (property)', async () => {
  const fc = (await import('fast-check')).default;
  // Subjects from the characters that matter: token characters, dots, wildcards, whitespace (a trailing newline too), non-ASCII.
  const subject = fc.stringMatching(/^[a-cZ0-9_.*> \t\n\u00e9$-]{0,24}$/);
  fc.assert(
    fc.property(subject, (s) => {
      const tokens = s.split('.');
      const valid = s.length > 0 && tokens.every((t) => /^[A-Za-z0-9_-]{1,128}$/.test(t));
      const r = parseSubject(`cg.v1.p.c.cmd.tool.${s}`);
      assert.equal(r.ok, valid, s);
      // A bad subject is refused with a syntax problem naming a token, never a form problem.
      if (!valid) assert.ok(!r.ok && r.problems.every((p) => p.code === 'UTP_SUBJECT_SYNTAX' && /^subject token \d+ /.test(p.message)), JSON.stringify(r));
    }),
    { numRuns: 2000 },
  );
});
