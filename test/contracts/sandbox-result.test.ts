import assert from 'node:assert/strict';
import { readFileSync } from 'node:fs';
import { test } from 'node:test';
import fc from 'fast-check';
import { z } from 'zod';
import { actionDescriptorContract, type ActionDescriptor } from '../../src/contracts/action-descriptor.js';
import { checkText } from '../../src/contracts/index.js';
import {
  sandboxResultContract as contract,
  sandboxResultCrossRules,
  validateSandboxResultAgainst,
  type SandboxResult,
} from '../../src/contracts/sandbox-result.js';
import { repoPath } from '../helpers/paths.js';

type Json = Record<string, any>; // eslint-disable-line @typescript-eslint/no-explicit-any -- test fixtures are mutated freely
const EXAMPLE = 'sandbox-result-run-report-command.json';
const exampleText = readFileSync(repoPath('examples/sandbox-results', EXAMPLE), 'utf8');
const sr = (): Json => JSON.parse(exampleText);
const descriptor = (name = 'run-report-command.json'): ActionDescriptor => {
  const r = actionDescriptorContract.parse(readFileSync(repoPath('examples/actions', name), 'utf8'));
  assert.ok(r.ok);
  return r.value;
};
const known = new Set(contract.rules.map((r) => r.code).concat('JSON_SYNTAX', 'JSON_DUPLICATE_KEY', 'JSON_TOO_DEEP', 'DOC_TOO_LARGE'));
const mut = (base: Json, f: (d: Json) => void): Json => {
  f(base);
  return base;
};
const problemsOf = (v: unknown) => {
  const r = contract.parse(JSON.stringify(v, null, 2));
  return r.ok ? [] : r.problems;
};
function expectCode(value: unknown, code: string, path?: string) {
  const problems = problemsOf(value);
  assert.ok(
    problems.some((p) => p.code === code && (path === undefined || p.path === path)),
    `expected ${code}${path ? ` at ${path}` : ''}, got ${JSON.stringify(problems.map((p) => [p.code, p.path]))}`,
  );
  for (const p of problems) assert.ok(known.has(p.code), p.code);
}
const valid = (v: Json): SandboxResult => {
  const r = contract.parse(JSON.stringify(v));
  assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
  return r.value;
};
const h = (c: string) => c.repeat(64);

test('the example is valid, detected, matches its descriptor, and round-trips', () => {
  assert.ok(contract.detect(EXAMPLE, exampleText));
  assert.equal(checkText(EXAMPLE, exampleText).kind, 'sandbox-result');
  const v = valid(sr());
  assert.deepEqual(validateSandboxResultAgainst(v, descriptor()), []);
  const back = contract.parse(contract.render(v));
  assert.ok(back.ok);
  assert.deepEqual(back.value, v);
  // stdout that mentions descriptor_version does not change the kind.
  const text = JSON.stringify(mut(sr(), (s) => (s.outputs.stdout.text = '{"descriptor_version": "1.0"}')));
  assert.equal(checkText('sandbox-result-x.json', text).kind, 'sandbox-result');
});

test('problems carry lines', () => {
  const lineOf = (t: string, needle: string) => t.split('\n').findIndex((l) => l.includes(needle)) + 1;
  const bad = exampleText.replace('"exit_code": 0', '"exit_code": 3');
  const r = contract.parse(bad);
  assert.ok(!r.ok);
  assert.deepEqual([r.problems[0]?.code, r.problems[0]?.line], ['SR_STATUS_INCONSISTENT', lineOf(bad, '"status"')]);
  const bad2 = exampleText.replace('"no_device_access": true,', '');
  const r2 = contract.parse(bad2);
  assert.ok(!r2.ok);
  assert.deepEqual([r2.problems[0]?.code, r2.problems[0]?.line, r2.problems[0]?.path], ['SR_COMPLIANCE_MISSING', lineOf(bad2, '"compliance"'), 'compliance.no_device_access']);
});

test('null-with-reason convention', () => {
  // A null with its reason is valid when the verdict does not rely on it.
  valid(mut(sr(), (s) => {
    s.resources.network_bytes_in = null;
    s.unmeasured['resources.network_bytes_in'] = 'no per-sandbox network accounting on this host';
  }));
  expectCode(mut(sr(), (s) => (s.side_effects.processes_spawned = null)), 'SR_NULL_WITHOUT_REASON', 'side_effects.processes_spawned');
  expectCode(mut(sr(), (s) => (s.unmeasured['resources.disk_write_bytes'] = 'x')), 'SR_REASON_WITHOUT_NULL', 'unmeasured["resources.disk_write_bytes"]');
  expectCode(mut(sr(), (s) => (s.unmeasured['resources.gpu_ms'] = 'x')), 'SR_REASON_WITHOUT_NULL');
  expectCode(mut(sr(), (s) => (s.unmeasured['resources.network_bytes_in'] = '')), 'SR_SCHEMA');
  // Unmeasured figures a compliance claim depends on make the claim unsupported.
  expectCode(mut(sr(), (s) => {
    s.resources.peak_memory_bytes = null;
    s.unmeasured['resources.peak_memory_bytes'] = 'cgroup memory controller missing';
  }), 'SR_COMPLIANCE_UNSUPPORTED', 'compliance.resources_within_limits');
  expectCode(mut(sr(), (s) => {
    s.side_effects.privileged_syscalls = null;
    s.side_effects.privileged_syscall_attempted = null;
    s.unmeasured['side_effects.privileged_syscalls'] = 'no seccomp log';
    s.unmeasured['side_effects.privileged_syscall_attempted'] = 'no seccomp log';
  }), 'SR_COMPLIANCE_UNSUPPORTED', 'compliance.no_privileged_syscalls');
  // An unhashed change: valid document, but only a blocking verdict.
  const unhashed = mut(sr(), (s) => {
    s.filesystem_diff.added[0].sha256_after = null;
    s.unmeasured['filesystem_diff.added[0].sha256_after'] = 'file removed before hashing';
    for (const f of ['effects_within_declaration', 'within_scope', 'rollback_possible']) s.compliance[f] = false;
  });
  expectCode(unhashed, 'SR_VERDICT_MUST_BLOCK');
  unhashed.verdict = { recommended_action: 'BLOCK', reasons: ['the diff cannot be verified'] };
  valid(unhashed);
});

test('rules, each with its code', () => {
  const deleted = { path: '/work/project/out/old.txt', type: 'file', mode: '0644', size_bytes: 3, sha256_before: h('a'), tombstone: 'tomb/1' };
  const cases: [string, Json, string, string?][] = [
    ['missing section', mut(sr(), (s) => delete s.verdict), 'SR_SCHEMA', 'verdict'],
    ['unknown field', mut(sr(), (s) => (s.execution.cpu = 1)), 'SR_UNKNOWN_FIELD', 'execution.cpu'],
    ['bad status', mut(sr(), (s) => (s.execution.status = 'OK')), 'SR_SCHEMA', 'execution.status'],
    ['bad time', mut(sr(), (s) => (s.execution.started_at = 'yesterday')), 'SR_TIME', 'execution.started_at'],
    ['wall mismatch', mut(sr(), (s) => (s.resources.wall_time_ms = 1)), 'SR_TIME', 'resources.wall_time_ms'],
    ['failure exit 0', mut(sr(), (s) => (s.execution.status = 'FAILURE')), 'SR_STATUS_INCONSISTENT'],
    ['ran without exit', mut(sr(), (s) => { s.execution.status = 'FAILURE'; s.execution.exit_code = null; }), 'SR_STATUS_INCONSISTENT'],
    ['captured > total', mut(sr(), (s) => (s.outputs.stderr.captured_bytes = 5)), 'SR_OUTPUT_INCONSISTENT', 'outputs.stderr.captured_bytes'],
    ['text longer than captured', mut(sr(), (s) => (s.outputs.stdout.text = 'x'.repeat(100))), 'SR_OUTPUT_INCONSISTENT', 'outputs.stdout.text'],
    ['truncated unsaid', mut(sr(), (s) => (s.outputs.stdout.total_bytes = 99)), 'SR_OUTPUT_INCONSISTENT', 'outputs.stdout.truncated'],
    ['dotdot path', mut(sr(), (s) => (s.filesystem_diff.added[0].path = '/work/project/out/../x')), 'SR_PATH_NOT_ABSOLUTE'],
    ['relative hardlink', mut(sr(), (s) => { s.filesystem_diff.added[0].type = 'hardlink'; s.filesystem_diff.added[0].link_target = 'x'; }), 'SR_PATH_NOT_ABSOLUTE'],
    ['modified needs before', mut(sr(), (s) => s.filesystem_diff.modified.push({ path: '/work/project/out/a', type: 'file', mode: '0644', size_bytes: 1, sha256_after: h('b') })), 'SR_HASH_MISSING'],
    ['deleted needs before', mut(sr(), (s) => s.filesystem_diff.deleted.push({ ...deleted, sha256_before: undefined })), 'SR_HASH_MISSING'],
    ['symlink needs target', mut(sr(), (s) => (s.filesystem_diff.added[0].type = 'symlink')), 'SR_DIFF_ENTRY'],
    ['added with before', mut(sr(), (s) => (s.filesystem_diff.added[0].sha256_before = h('c'))), 'SR_DIFF_ENTRY'],
    ['added with tombstone', mut(sr(), (s) => (s.filesystem_diff.added[0].tombstone = 't')), 'SR_DIFF_ENTRY'],
    ['fifo with hash', mut(sr(), (s) => (s.filesystem_diff.added[0].type = 'fifo')), 'SR_DIFF_ENTRY'],
    ['tombstone', mut(sr(), (s) => s.filesystem_diff.deleted.push({ ...deleted, tombstone: undefined })), 'SR_TOMBSTONE_MISSING'],
    ['duplicate', mut(sr(), (s) => s.filesystem_diff.deleted.push({ ...deleted, path: '/work/project/out/report.txt' })), 'SR_DIFF_DUPLICATE'],
    ['bad hash', mut(sr(), (s) => (s.filesystem_diff.added[0].sha256_after = 'ABC')), 'SR_SCHEMA'],
    ['device listed, flag false', mut(sr(), (s) => (s.side_effects.device_access = [{ path: '/dev/kvm', denied: true }])), 'SR_SIDE_EFFECTS_INCONSISTENT'],
    ['network bytes, flag false', mut(sr(), (s) => (s.resources.network_bytes_out = 10)), 'SR_SIDE_EFFECTS_INCONSISTENT'],
    ['device claim', mut(sr(), (s) => { s.side_effects.device_access = [{ path: '/dev/kvm', denied: true }]; s.side_effects.device_access_attempted = true; }), 'SR_COMPLIANCE_UNSUPPORTED', 'compliance.no_device_access'],
    ['timeout within limits', mut(sr(), (s) => { s.execution.status = 'TIMEOUT'; s.execution.exit_code = null; s.execution.signal = 'SIGKILL'; }), 'SR_COMPLIANCE_UNSUPPORTED', 'compliance.resources_within_limits'],
    ['undeclared network promoted', mut(sr(), (s) => (s.compliance.no_undeclared_network = false)), 'SR_VERDICT_MUST_BLOCK'],
    ['over limits, confirmation only', mut(sr(), (s) => { s.compliance.resources_within_limits = false; s.verdict = { recommended_action: 'REQUIRE_CONFIRMATION', reasons: ['x'] }; }), 'SR_VERDICT_MUST_BLOCK'],
    ['privileged promoted', mut(sr(), (s) => (s.compliance.no_privileged_syscalls = false)), 'SR_VERDICT_NOT_PROMOTE'],
    ['policy abort promoted', mut(sr(), (s) => { s.execution.status = 'POLICY_ABORTED'; s.execution.exit_code = null; }), 'SR_VERDICT_NOT_PROMOTE'],
    ['no reasons', mut(sr(), (s) => (s.verdict = { recommended_action: 'REQUIRE_CONFIRMATION', reasons: [] })), 'SR_VERDICT_REASONS'],
    ['retain_days', mut(sr(), (s) => (s.audit.retain_days = 0)), 'SR_SCHEMA', 'audit.retain_days'],
  ];
  for (const [name, value, code, path] of cases) {
    try {
      expectCode(value, code, path);
    } catch (e) {
      throw new Error(`case "${name}": ${(e as Error).message}`, { cause: e });
    }
  }
  // Non-SUCCESS status with full compliance may still be promoted: promotion depends on compliance.
  valid(mut(sr(), (s) => { s.execution.status = 'FAILURE'; s.execution.exit_code = 2; }));
  // A denied-everything run that is blocked is a valid document.
  valid(mut(sr(), (s) => {
    s.execution.status = 'SANDBOX_ERROR';
    s.execution.exit_code = null;
    s.verdict = { recommended_action: 'BLOCK', reasons: ['sandbox could not start'] };
  }));
});

test('cross-document checks against the descriptor', () => {
  const d = descriptor();
  const codes = (s: Json) => validateSandboxResultAgainst(valid(s), d).map((p) => `${p.code}@${p.path}`);
  assert.deepEqual(codes(mut(sr(), (s) => (s.action_id = '11111111-2222-4333-8444-555555555555'))), ['SR_ACTION_ID_MISMATCH@action_id', 'SR_VERDICT_MUST_BLOCK@verdict.recommended_action']);
  const outside = codes(mut(sr(), (s) => s.filesystem_diff.added.push({ path: '/work/other/x', type: 'file', mode: '0600', size_bytes: 1, sha256_after: h('d') })));
  assert.ok(outside.includes('SR_OUTSIDE_SCOPE@filesystem_diff.added[1].path'), outside.join());
  assert.ok(outside.includes('SR_UNDECLARED_EFFECT@filesystem_diff.added[1].path'));
  assert.ok(outside.includes('SR_COMPLIANCE_MISMATCH@compliance.within_scope'));
  assert.ok(outside.includes('SR_COMPLIANCE_MISMATCH@compliance.effects_within_declaration'));
  assert.ok(outside.includes('SR_VERDICT_MUST_BLOCK@verdict.recommended_action'));
  // In scope but undeclared: modified instead of added.
  const modified = codes(mut(sr(), (s) => s.filesystem_diff.modified.push({ path: '/work/project/notes/a.md', type: 'file', mode: '0644', size_bytes: 1, sha256_before: h('1'), sha256_after: h('2') })));
  assert.deepEqual(modified.filter((c) => c.startsWith('SR_OUTSIDE')), []);
  assert.ok(modified.includes('SR_UNDECLARED_EFFECT@filesystem_diff.modified[0].path'));
  // Resources over the caps.
  const over = codes(mut(sr(), (s) => { s.resources.peak_memory_bytes = 257 * 1024 * 1024; }));
  assert.ok(over.includes('SR_RESOURCE_OVER_LIMIT@resources'), over.join());
  assert.ok(over.includes('SR_COMPLIANCE_MISMATCH@compliance.resources_within_limits'));
  const cpu = codes(mut(sr(), (s) => { s.resources.cpu_user_ms = 4000; s.resources.cpu_system_ms = 1001; }));
  assert.ok(cpu.includes('SR_RESOURCE_OVER_LIMIT@resources'));
  // Network without a declaration.
  const net = codes(mut(sr(), (s) => {
    s.side_effects.network_attempts = [{ address: '203.0.113.5', port: 443, protocol: 'tcp', allowed: false }];
    s.side_effects.network_used = true;
    s.compliance.no_undeclared_network = false;
    s.verdict = { recommended_action: 'BLOCK', reasons: ['network attempt'] };
  }));
  assert.deepEqual(net, ['SR_UNDECLARED_NETWORK@side_effects.network_attempts']);
  // A blocked result with the same violation reports it without a verdict problem.
  const blocked = codes(mut(sr(), (s) => {
    s.filesystem_diff.added[0].path = '/work/project/out/other.txt';
    s.compliance.effects_within_declaration = false;
    s.verdict = { recommended_action: 'BLOCK', reasons: ['undeclared file'] };
  }));
  assert.deepEqual(blocked, ['SR_UNDECLARED_EFFECT@filesystem_diff.added[0].path']);
  for (const p of validateSandboxResultAgainst(valid(sr()), descriptor('delete-logs.json'))) assert.ok(sandboxResultCrossRules.some((r) => r.code === p.code));
});

test('cross-document: deletes match globs; new parent directories of declared creates are allowed', () => {
  const d = descriptor('delete-logs.json');
  const base = mut(sr(), (s) => {
    s.action_id = d.action_id;
    s.filesystem_diff.added = [];
    s.filesystem_diff.deleted = [
      { path: '/srv/app/logs/a.log', type: 'file', mode: '0644', size_bytes: 10, sha256_before: h('e'), tombstone: 'tomb/a' },
      { path: '/srv/app/logs/old/b.log', type: 'file', mode: '0644', size_bytes: 10, sha256_before: h('f'), tombstone: 'tomb/b' },
    ];
  });
  assert.deepEqual(validateSandboxResultAgainst(valid(base), d), []);
  base.filesystem_diff.deleted.push({ path: '/srv/app/logs/keep.txt', type: 'file', mode: '0644', size_bytes: 1, sha256_before: h('0'), tombstone: 'tomb/c' });
  assert.deepEqual(validateSandboxResultAgainst(valid(base), d).map((p) => p.code), ['SR_UNDECLARED_EFFECT', 'SR_COMPLIANCE_MISMATCH', 'SR_VERDICT_MUST_BLOCK']);
  const c = descriptor('composite-archive.json');
  const moved = mut(sr(), (s) => {
    s.action_id = c.action_id;
    s.filesystem_diff.added = [
      { path: '/work/project/exports/archive', type: 'dir', mode: '0755', size_bytes: 4096 },
      { path: '/work/project/exports/archive/2025-02.csv', type: 'file', mode: '0644', size_bytes: 10, sha256_after: h('1') },
    ];
    s.filesystem_diff.deleted = [{ path: '/work/project/exports/2025-02.csv', type: 'file', mode: '0644', size_bytes: 10, sha256_before: h('1'), tombstone: 'tomb/x' }];
  });
  assert.deepEqual(validateSandboxResultAgainst(valid(moved), c), []);
});

test('JSON Schema publication works', () => {
  const schema = z.toJSONSchema(contract.schemas['sandbox-result'] as z.ZodType) as Json;
  assert.equal(schema.additionalProperties, false);
  assert.ok(schema.required.includes('compliance'));
  assert.deepEqual(schema.properties.compliance.required.length, 8);
});

test('property: mutated results never throw; problems are coded', () => {
  const paths: (string | number)[][] = [];
  const walk = (v: unknown, p: (string | number)[]) => {
    paths.push(p);
    if (Array.isArray(v)) v.forEach((x, i) => walk(x, [...p, i]));
    else if (v && typeof v === 'object') for (const [k, x] of Object.entries(v)) walk(x, [...p, k]);
  };
  walk(sr(), []);
  fc.assert(
    fc.property(fc.constantFrom(...paths), fc.oneof(fc.jsonValue(), fc.constant(undefined), fc.constant(null), fc.nat()), (path, value) => {
      let root: Json = sr();
      if (path.length === 0) root = value as Json;
      else {
        let o: Json = root;
        for (const seg of path.slice(0, -1)) o = o[seg];
        o[path.at(-1) as string] = value;
      }
      const r = contract.parse(JSON.stringify(root) ?? '');
      if (!r.ok) for (const p of r.problems) assert.ok(known.has(p.code) && typeof p.line === 'number', p.code);
      else assert.deepEqual(validateSandboxResultAgainst(r.value, descriptor()).filter((p) => !sandboxResultCrossRules.some((c) => c.code === p.code)), []);
    }),
    { numRuns: 800 },
  );
});

test('property: generated valid results round-trip', () => {
  fc.assert(
    fc.property(fc.nat(1e6), fc.nat(1e6), fc.string({ maxLength: 300 }), fc.nat(10), fc.constantFrom('BLOCK', 'FORCE_ROLLBACK', 'REQUIRE_CONFIRMATION'), (cpu, mem, out, extra, action) => {
      const s = mut(sr(), (x) => {
        x.resources.cpu_user_ms = cpu;
        x.resources.peak_memory_bytes = mem;
        x.outputs.stdout.text = out;
        x.outputs.stdout.captured_bytes = Buffer.byteLength(out);
        x.outputs.stdout.total_bytes = Buffer.byteLength(out) + extra;
        x.outputs.stdout.truncated = extra > 0;
        x.verdict = { recommended_action: action, reasons: ['checked'] };
      });
      const v = valid(s);
      const back = contract.parse(contract.render(v));
      assert.ok(back.ok);
      assert.deepEqual(back.value, v);
      assert.deepEqual(v, s);
    }),
    { numRuns: 300 },
  );
});
