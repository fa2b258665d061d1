import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import fc from 'fast-check';
import { z } from 'zod';
import { actionDescriptorContract as contract, validateActionDescriptor, type ActionDescriptor } from '../../src/contracts/action-descriptor.js';
import { globWithin, pathMatches } from '../../src/base/globs.js';
import { checkText } from '../../src/contracts/index.js';
import { repoPath } from '../helpers/paths.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- test fixtures are mutated freely
const exampleText = (name: string) => readFileSync(repoPath('examples/actions', name), 'utf8');
const example = (name: string): Json => JSON.parse(exampleText(name));
const cmd = () => example('run-report-command.json');
const del = () => example('delete-logs.json');
const wr = () => example('write-config.json');
const comp = () => example('composite-archive.json');
const known = new Set(contract.rules.map((r) => r.code).concat('DOC_TOO_LARGE'));

function problemsOf(value: unknown) {
  const r = contract.parse(JSON.stringify(value, null, 2));
  return r.ok ? [] : r.problems;
}
function expectCode(value: unknown, code: string, path?: string) {
  const problems = problemsOf(value);
  const hit = problems.find((p) => p.code === code && (path === undefined || p.path === path));
  assert.ok(hit, `expected ${code}${path ? ` at ${path}` : ''}, got ${JSON.stringify(problems.map((p) => [p.code, p.path]))}`);
  for (const p of problems) assert.ok(known.has(p.code), `unknown code ${p.code}`);
}
const mut = (base: Json, f: (d: Json) => void): Json => {
  f(base);
  return base;
};

test('examples are valid, detected, and round-trip through render', () => {
  for (const name of ['delete-logs.json', 'run-report-command.json', 'write-config.json', 'composite-archive.json']) {
    const text = exampleText(name);
    assert.ok(contract.detect(name, text), name);
    const r = contract.parse(text);
    assert.ok(r.ok, `${name}: ${JSON.stringify(!r.ok && r.problems)}`);
    const again = contract.parse(contract.render(r.value));
    assert.ok(again.ok);
    assert.deepEqual(again.value, r.value);
    assert.equal(contract.render(again.value), contract.render(r.value));
    assert.equal(checkText(name, text).kind, 'action-descriptor');
  }
});

test('detection: .json with a top-level descriptor_version only', () => {
  const t = exampleText('delete-logs.json');
  assert.equal(contract.detect('a.md', t), false);
  assert.equal(contract.detect('a.json', '{"x": {"descriptor_version": "1.0"}}'), false);
  assert.equal(contract.detect('a.json', '{"descriptor_version": "1.0", '), true);
});

test('problems carry the line of the offending field', () => {
  const text = exampleText('run-report-command.json');
  const lineOf = (needle: string) => text.split('\n').findIndex((l) => l.includes(needle)) + 1;
  const bad = text.replace('"max_runs": 1', '"max_runs": 2').replace('"log_level": "SUMMARY"', '"log_level": "FORENSIC"');
  const r = contract.parse(bad);
  assert.ok(!r.ok);
  const p = r.problems.find((x) => x.code === 'AD_SANDBOX_MAX_RUNS');
  assert.equal(p?.line, lineOf('"max_runs"'));
  assert.equal(p?.path, 'sandbox.max_runs');
  // Semantic rules run only on a structurally valid descriptor.
  assert.equal(r.problems.some((x) => x.code === 'AD_FORENSIC_LOG_LEVEL'), false);
  const r2 = contract.parse(text.replace('"log_level": "SUMMARY"', '"log_level": "FORENSIC"'));
  assert.ok(!r2.ok);
  assert.equal(r2.problems[0]?.line, lineOf('"log_level"'));
  const r3 = contract.parse(text.replace('"max_cpu_ms": 5000, ', '"max_cpu_ms": 5000, "max_gpu_ms": 1, '));
  assert.ok(!r3.ok);
  assert.deepEqual([r3.problems[0]?.code, r3.problems[0]?.line, r3.problems[0]?.path], ['AD_UNKNOWN_FIELD', lineOf('"max_cpu_ms"'), 'resources.max_gpu_ms']);
});

test('hard fails, each with its own code and path', () => {
  const cases: [string, Json, string, string?][] = [
    ['not an object', [] as unknown as Json, 'AD_SCHEMA'],
    ['missing field', mut(cmd(), (d) => delete d.confirmation), 'AD_SCHEMA', 'confirmation'],
    ['unknown nested field', mut(cmd(), (d) => (d.scope.filesystem.follow_symlinks = true)), 'AD_UNKNOWN_FIELD', 'scope.filesystem.follow_symlinks'],
    ['version', mut(cmd(), (d) => (d.descriptor_version = '1.1')), 'AD_VERSION'],
    ['uuid', mut(cmd(), (d) => (d.action_id = '00000000-0000-0000-0000-000000000000')), 'AD_ACTION_ID'],
    ['timestamp', mut(cmd(), (d) => (d.created_at = '2025-13-01T00:00:00Z')), 'AD_CREATED_AT'],
    ['hour 24', mut(cmd(), (d) => (d.created_at = '2025-01-01T24:00:00Z')), 'AD_CREATED_AT'],
    ['created_by', mut(cmd(), (d) => (d.created_by = 'AI')), 'AD_CREATED_BY'],
    ['intent too long', mut(cmd(), (d) => (d.intent_summary = 'x'.repeat(1001))), 'AD_INTENT_SUMMARY'],
    ['intent blank', mut(cmd(), (d) => (d.intent_summary = '   ')), 'AD_INTENT_SUMMARY'],
    ['intent bidi', mut(cmd(), (d) => (d.intent_summary = 'safe \u202e evil')), 'AD_INTENT_SUMMARY'],
    ['type', mut(cmd(), (d) => (d.action_type = 'OTHER')), 'AD_ACTION_TYPE'],
    ['risk', mut(cmd(), (d) => (d.risk_level = 'NONE')), 'AD_SCHEMA', 'risk_level'],
    ['scope missing', mut(cmd(), (d) => delete d.scope.filesystem), 'AD_SCOPE_IMPLICIT', 'scope.filesystem'],
    ['scope empty string', mut(cmd(), (d) => (d.scope.filesystem.paths = [''])), 'AD_SCOPE_IMPLICIT'],
    ['scope relative', mut(cmd(), (d) => (d.scope.filesystem.paths[1] = 'out')), 'AD_SCOPE_IMPLICIT', 'scope.filesystem.paths[1]'],
    ['scope dotdot', mut(cmd(), (d) => (d.scope.filesystem.paths[1] = '/work/project/../project/out')), 'AD_SCOPE_IMPLICIT'],
    ['scope trailing slash', mut(cmd(), (d) => (d.scope.filesystem.paths[1] = '/work/project/out/')), 'AD_SCOPE_IMPLICIT'],
    ['scope tilde', mut(cmd(), (d) => (d.scope.filesystem.paths[1] = '~')), 'AD_SCOPE_IMPLICIT'],
    ['scope wildcard', mut(cmd(), (d) => (d.scope.filesystem.paths[1] = '/work/project/o*')), 'AD_SCOPE_WILDCARD', 'scope.filesystem.paths[1]'],
    ['host /proc', mut(del(), (d) => (d.scope.filesystem.paths = ['/proc/self'])), 'AD_HOST_ACCESS'],
    ['host /var/lib', mut(del(), (d) => (d.scope.filesystem.paths = ['/var/lib/app'])), 'AD_HOST_ACCESS'],
    ['host top level', mut(del(), (d) => (d.scope.filesystem.paths = ['/srv'])), 'AD_HOST_ACCESS'],
    ['host glob at top', mut(del(), (d) => (d.scope.filesystem.paths = ['/*/app'])), 'AD_HOST_ACCESS'],
    ['host credentials', mut(del(), (d) => (d.scope.filesystem.paths = ['/home/ana/.ssh'])), 'AD_HOST_ACCESS'],
    ['host effect', mut(del(), (d) => (d.effects.filesystem.delete = ['/etc/*.conf'])), 'AD_HOST_ACCESS', 'effects.filesystem.delete[0]'],
    ['resources negative', mut(cmd(), (d) => (d.resources.max_disk_mb = -1)), 'AD_RESOURCES_UNBOUNDED', 'resources.max_disk_mb'],
    ['resources null', mut(cmd(), (d) => (d.resources.max_duration_ms = null)), 'AD_RESOURCES_UNBOUNDED'],
    ['resources missing one', mut(cmd(), (d) => delete d.resources.max_cpu_ms), 'AD_RESOURCES_UNBOUNDED'],
    ['rollback off', mut(cmd(), (d) => (d.rollback.supported = false)), 'AD_ROLLBACK_DISABLED', 'rollback.supported'],
    ['rollback missing', mut(cmd(), (d) => delete d.rollback), 'AD_ROLLBACK_DISABLED'],
    ['rollback scope none', mut(cmd(), (d) => (d.rollback.rollback_scope = 'none')), 'AD_ROLLBACK_DISABLED'],
    ['effects missing', mut(cmd(), (d) => delete d.effects), 'AD_EFFECTS_MISSING'],
    ['delete lists nothing', mut(del(), (d) => (d.effects.filesystem.delete = [])), 'AD_EFFECTS_MISSING'],
    ['network request without network', mut(cmd(), (d) => { d.action_type = 'NETWORK_REQUEST'; delete d.command; }), 'AD_EFFECTS_MISSING'],
    ['effect outside scope', mut(cmd(), (d) => (d.effects.filesystem.create = ['/work/project/report.txt'])), 'AD_EFFECT_OUTSIDE_SCOPE', 'effects.filesystem.create[0]'],
    ['effect deeper than non-recursive scope', mut(cmd(), (d) => (d.effects.filesystem.create = ['/work/project/out/sub/r.txt'])), 'AD_EFFECT_OUTSIDE_SCOPE'],
    ['effect glob wider than scope', mut(del(), (d) => (d.effects.filesystem.delete = ['/srv/app/*/x.log'])), 'AD_EFFECT_OUTSIDE_SCOPE'],
    ['effect with braces', mut(del(), (d) => (d.effects.filesystem.delete = ['/srv/app/logs/{a,b}.log'])), 'AD_PATH_INVALID'],
    ['effect bad **', mut(del(), (d) => (d.effects.filesystem.delete = ['/srv/app/logs/a**.log'])), 'AD_PATH_INVALID'],
    ['sandbox for HIGH', mut(wr(), (d) => (d.risk_level = 'HIGH')), 'AD_SANDBOX_REQUIRED', 'sandbox.required'],
    ['sandbox for command', mut(cmd(), (d) => (d.sandbox.required = false)), 'AD_SANDBOX_REQUIRED'],
    ['sandbox for delete effect', mut(wr(), (d) => (d.effects.filesystem.delete = ['/work/project/old.txt'])), 'AD_SANDBOX_REQUIRED'],
    ['max_runs', mut(cmd(), (d) => (d.sandbox.max_runs = 0)), 'AD_SANDBOX_MAX_RUNS'],
    ['network: allow without effect', mut(cmd(), (d) => (d.sandbox.allow_network = true)), 'AD_NETWORK_INCONSISTENT', 'sandbox.allow_network'],
    ['network: scope without effect', mut(cmd(), (d) => (d.scope.network.required = true)), 'AD_NETWORK_INCONSISTENT'],
    ['network: effect but sandbox closed', mut(cmd(), (d) => { d.effects.network = true; d.scope.network.required = true; }), 'AD_NETWORK_INCONSISTENT', 'sandbox.allow_network'],
    ['background: setsid', mut(cmd(), (d) => (d.command = ['/usr/bin/setsid', 'python3', 'x.py'])), 'AD_BACKGROUND_EXECUTION', 'command'],
    ['background: env wrapper', mut(cmd(), (d) => (d.command = ['env', 'A=1', 'nohup', 'x'])), 'AD_BACKGROUND_EXECUTION'],
    ['background: lone &', mut(cmd(), (d) => (d.command = ['/usr/bin/python3', 'x.py', '&'])), 'AD_BACKGROUND_EXECUTION'],
    ['background: disown in script', mut(cmd(), (d) => (d.command = ['bash', '-c', 'sleep 100 & disown'])), 'AD_BACKGROUND_EXECUTION'],
    ['persistence: systemctl', mut(cmd(), (d) => (d.command = ['/bin/systemctl', 'enable', 'x'])), 'AD_PERSISTENCE'],
    ['persistence: at in script', mut(cmd(), (d) => (d.command = ['sh', '-c', 'echo run | at now + 1 hour'])), 'AD_PERSISTENCE'],
    ['persistence: autostart', mut(wr(), (d) => { d.scope.filesystem.paths = ['/home/ana/.config']; d.scope.filesystem.recursive = true; d.effects.filesystem.create = ['/home/ana/.config/autostart/x.desktop']; d.write.path = '/home/ana/.config/autostart/x.desktop'; }), 'AD_PERSISTENCE'],
    ['forensic', mut(cmd(), (d) => (d.audit.log_level = 'FORENSIC')), 'AD_FORENSIC_LOG_LEVEL', 'audit.log_level'],
    ['audit off', mut(cmd(), (d) => (d.audit.log = false)), 'AD_AUDIT_DISABLED'],
    ['retain_days 0', mut(cmd(), (d) => (d.audit.retain_days = 0)), 'AD_SCHEMA', 'audit.retain_days'],
    ['command missing', mut(cmd(), (d) => delete d.command), 'AD_CARRIER_MISSING', 'command'],
    ['write missing', mut(wr(), (d) => delete d.write), 'AD_CARRIER_MISSING', 'write'],
    ['children missing', mut(comp(), (d) => delete d.children), 'AD_CARRIER_MISSING', 'children'],
    ['command on delete', mut(del(), (d) => (d.command = ['rm'])), 'AD_FIELD_NOT_ALLOWED', 'command'],
    ['children on command', mut(cmd(), (d) => (d.children = [wr()])), 'AD_FIELD_NOT_ALLOWED', 'children'],
    ['move on write', mut(wr(), (d) => (d.move = { from: '/a/b', to: '/a/c' })), 'AD_FIELD_NOT_ALLOWED', 'move'],
    ['argv[0] with space', mut(cmd(), (d) => (d.command = ['python3 -c 1'])), 'AD_COMMAND_INVALID', 'command[0]'],
    ['argv NUL', mut(cmd(), (d) => d.command.push('a\u0000b')), 'AD_COMMAND_INVALID', 'command[4]'],
    ['argv not strings', mut(cmd(), (d) => (d.command = ['/bin/echo', 1])), 'AD_COMMAND_INVALID', 'command[1]'],
    ['argv[0] relative', mut(cmd(), (d) => (d.command = ['bin/tool'])), 'AD_COMMAND_INVALID'],
    ['write no content', mut(wr(), (d) => delete d.write.content_base64), 'AD_CARRIER_INVALID', 'write'],
    ['write bad base64', mut(wr(), (d) => (d.write.content_base64 = 'not base64!')), 'AD_SCHEMA', 'write.content_base64'],
    ['write glob path', mut(wr(), (d) => (d.write.path = '/work/project/*.cfg')), 'AD_PATH_INVALID', 'write.path'],
    ['move.to undeclared', mut(comp(), (d) => (d.children[1].move.to = '/work/project/exports/archive/other.csv')), 'AD_CARRIER_INVALID', 'children[1].move.to'],
    ['empty children', mut(comp(), (d) => (d.children = [])), 'AD_SCHEMA', 'children'],
    ['too many children', mut(comp(), (d) => (d.children = Array.from({ length: 33 }, () => d.children[0]))), 'AD_COMPOSITE_LIMIT'],
  ];
  for (const [name, value, code, path] of cases) {
    try {
      expectCode(value, code, path);
    } catch (e) {
      throw new Error(`case "${name}": ${(e as Error).message}`, { cause: e });
    }
  }
});

test('commands that merely mention a background or persistence word are fine', () => {
  for (const argv of [
    ['/usr/bin/grep', '-r', 'nohup', '/work/project/notes'],
    ['/bin/echo', 'at', 'crontab', '&&'],
    ['sh', '-c', 'make && make test 2>&1 > /work/project/out/log'],
    ['timeout', '5', '/usr/bin/python3', 'x.py'],
  ]) {
    const problems = problemsOf(mut(cmd(), (d) => (d.command = argv)));
    assert.deepEqual(problems, [], JSON.stringify(argv));
  }
});

test('composite children are validated on their own, with children[i] paths', () => {
  expectCode(mut(comp(), (d) => (d.children[1].rollback.supported = false)), 'AD_ROLLBACK_DISABLED', 'children[1].rollback.supported');
  expectCode(mut(comp(), (d) => (d.children[0].extra = 1)), 'AD_UNKNOWN_FIELD', 'children[0].extra');
  expectCode(mut(comp(), (d) => (d.children[1].sandbox.required = false)), 'AD_SANDBOX_REQUIRED', 'children[1].sandbox.required');
  expectCode(mut(comp(), (d) => (d.children[0].scope.filesystem.paths = ['/work/elsewhere'])), 'AD_CHILD_EXCEEDS_PARENT', 'children[0].scope.filesystem.paths[0]');
  expectCode(mut(comp(), (d) => (d.children[0].effects.filesystem.create = ['/work/project/exports/other'])), 'AD_CHILD_EXCEEDS_PARENT', 'children[0].effects.filesystem.create[0]');
  expectCode(mut(comp(), (d) => (d.children[0].resources.max_cpu_ms = 99999)), 'AD_CHILD_EXCEEDS_PARENT', 'children[0].resources.max_cpu_ms');
  expectCode(mut(comp(), (d) => (d.children[0].action_id = d.children[1].action_id)), 'AD_ACTION_ID', 'children[1].action_id');
  expectCode(mut(comp(), (d) => (d.sandbox.required = false)), 'AD_SANDBOX_REQUIRED', 'sandbox.required');
  // The line of a child's problem is inside the child.
  const text = exampleText('composite-archive.json').replace('"move": { "from"', '"move": { "frm"');
  const r = contract.parse(text);
  assert.ok(!r.ok);
  const line = text.split('\n').findIndex((l) => l.includes('"frm"')) + 1;
  assert.ok(r.problems.some((p) => p.path === 'children[1].move.frm' && p.code === 'AD_UNKNOWN_FIELD' && p.line === line), JSON.stringify(r.problems));
  // Nesting: three levels of composites are fine, four are not.
  const nestOnce = (inner: Json, tag: string): Json => {
    const outer = comp();
    outer.action_id = outer.action_id.slice(0, 34) + tag;
    outer.children[0].action_id = outer.children[0].action_id.slice(0, 34) + tag;
    outer.children[1].action_id = outer.children[1].action_id.slice(0, 34) + tag;
    outer.children = [inner, ...outer.children];
    return outer;
  };
  const three = nestOnce(nestOnce(comp(), '01'), '02'); // three composite levels
  assert.deepEqual(problemsOf(three), []);
  expectCode(nestOnce(three, '03'), 'AD_COMPOSITE_LIMIT', 'children[0].children[0].children[0].children');
});

test('globs: containment and matching', () => {
  assert.ok(globWithin({ pattern: '/p/logs', mode: 'subtree' }, '/p/logs/**/*.log'));
  assert.ok(!globWithin({ pattern: '/p/logs', mode: 'subtree' }, '/p/logsX/a'));
  assert.ok(globWithin({ pattern: '/p/logs', mode: 'children' }, '/p/logs/.hidden'));
  assert.ok(!globWithin({ pattern: '/p/logs', mode: 'children' }, '/p/logs/a/b'));
  assert.ok(!globWithin({ pattern: '/p/*.log', mode: 'exact' }, '/p/*'));
  assert.ok(pathMatches('/p/**/*.log', '/p/a.log'));
  assert.ok(pathMatches('/p/**/*.log', '/p/x/y/a.log'));
  assert.ok(!pathMatches('/p/**/*.log', '/p/.x/a.log'));
  assert.ok(!pathMatches('/p/*.log', '/p/.a.log'));
  assert.ok(pathMatches('/p/.*.log', '/p/.a.log'));
  assert.ok(pathMatches('/p/file?.[ch]', '/p/file1.c'));
  assert.ok(!pathMatches('/p/file?.[!ch]', '/p/file1.c'));
  assert.ok(!pathMatches('/p/a.b', '/p/aXb'));
});

test('JSON Schema publication works', () => {
  const schema = z.toJSONSchema(contract.schemas['action-descriptor'] as z.ZodType) as Json;
  assert.equal(schema.type, 'object');
  assert.equal(schema.additionalProperties, false);
  assert.ok(schema.required.includes('rollback'));
});

const ALL_TYPES = ['FILE_READ', 'PACKAGE_INSTALL', 'UI_AUTOMATION', 'CONFIG_CHANGE', 'PACKAGE_REMOVE'];

test('types without a carrier still validate structurally', () => {
  for (const t of ALL_TYPES) {
    const d = mut(del(), (x) => {
      x.action_type = t;
      x.effects.filesystem.delete = [];
      x.confirmation.required = false;
    });
    assert.deepEqual(problemsOf(d), [], t);
  }
});

test('property: random JSON and mutated descriptors never throw; problems are coded', () => {
  const paths: (string | number)[][] = [];
  const walk = (v: unknown, p: (string | number)[]) => {
    paths.push(p);
    if (Array.isArray(v)) v.forEach((x, i) => walk(x, [...p, i]));
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, [...p, k]);
  };
  walk(comp(), []);
  const set = (root: Json, path: (string | number)[], value: unknown): Json => {
    if (path.length === 0) return value as Json;
    let o: Json = root;
    for (const seg of path.slice(0, -1)) o = o[seg];
    o[path.at(-1) as string] = value;
    return root;
  };
  fc.assert(
    fc.property(fc.constantFrom(...paths), fc.oneof(fc.jsonValue(), fc.constant(undefined), fc.string()), (path, value) => {
      const d = set(comp(), path, value);
      const text = JSON.stringify(d) ?? 'null';
      const r = contract.parse(text);
      if (!r.ok) for (const p of r.problems) assert.ok(known.has(p.code) && p.message.length > 0, p.code);
    }),
    { numRuns: 800 },
  );
  fc.assert(
    fc.property(fc.jsonValue(), (v) => {
      const r = contract.parse(JSON.stringify({ descriptor_version: '1.0', x: v }));
      assert.ok(!r.ok);
    }),
    { numRuns: 300 },
  );
});

test('property: generated valid descriptors round-trip', () => {
  const seg = fc.stringMatching(/^[a-z][a-z0-9_-]{0,11}$/);
  const uuid = fc.uuid().filter((u) => /^[0-9a-f]{8}-[0-9a-f]{4}-[1-8]/.test(u) && /^[89ab]/.test(u.split('-')[3] as string));
  fc.assert(
    fc.property(seg, seg, seg, uuid, fc.integer({ min: 1, max: 1e9 }), fc.double({ min: 0.5, max: 1e6, noNaN: true }), fc.string({ maxLength: 200 }), fc.boolean(), (a, b, f, id, cpu, mem, intentTail, confirm) => {
      const d = mut(cmd(), (x) => {
        x.action_id = id;
        x.scope.filesystem.paths = [`/${a}/${b}`];
        x.effects.filesystem.create = [`/${a}/${b}/${f}.txt`];
        x.command = ['/usr/bin/tool', `/${a}/${b}/${f}.txt`, intentTail];
        x.resources.max_cpu_ms = cpu;
        x.resources.max_memory_mb = mem;
        x.intent_summary = `Write ${f}.txt. ${intentTail.replace(/[\u0000-\u001f\u007f\u202a-\u202e\u2066-\u2069&]/g, '')}`; // eslint-disable-line no-control-regex
        x.confirmation.required = confirm;
      });
      if (['/etc', '/usr', '/opt', '/run', '/bin', '/lib', '/dev', '/sys', '/proc', '/root', '/boot', '/snap', '/sbin'].some((h) => `/${a}` === h || `/${a}`.startsWith(h + '/'))) return;
      const r = contract.parse(JSON.stringify(d));
      if (!r.ok && r.problems.every((p) => p.code === 'AD_BACKGROUND_EXECUTION' || p.code === 'AD_PERSISTENCE' || p.code === 'AD_COMMAND_INVALID')) return;
      assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
      const back = contract.parse(contract.render(r.value));
      assert.ok(back.ok);
      assert.deepEqual(back.value, r.value);
      assert.deepEqual(back.value as ActionDescriptor, d);
    }),
    { numRuns: 300 },
  );
});

test('validateActionDescriptor accepts already-parsed values', () => {
  assert.ok(validateActionDescriptor(cmd()).ok);
  assert.ok(!validateActionDescriptor(null).ok);
});

test('hostile globs and paths terminate quickly', () => {
  // An unclosed `[` in an (invalid) parent effect once made the child check loop forever.
  const d = mut(comp(), (x) => (x.effects.filesystem.create[1] = '$;BF][\\'));
  expectCode(d, 'AD_PATH_INVALID');
  // Many stars against a long name: no regex backtracking.
  const start = performance.now();
  assert.equal(pathMatches(`/srv/app/${'*a'.repeat(50)}b`, `/srv/app/${'a'.repeat(4000)}`), false);
  assert.equal(globWithin({ pattern: '/p/q', mode: 'subtree' }, `/p/q${'/x'.repeat(300)}`), false); // past 256 segments: fail closed
  expectCode(mut(del(), (x) => (x.effects.filesystem.delete = [`/srv/app/logs${'/**'.repeat(3)}/*.log`])), 'AD_PATH_INVALID');
  assert.ok(performance.now() - start < 1000);
  assert.ok(pathMatches('/p/[a-c]x?y*', '/p/bxQyzzz'));
  assert.ok(!pathMatches('/p/[!a-c]x', '/p/bx'));
  assert.ok(pathMatches('/p/[', '/p/['));
});
