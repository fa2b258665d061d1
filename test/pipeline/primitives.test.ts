import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, mkdirSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { test } from 'node:test';
import { scopedWorkspace, testScopeDir } from '../helpers/workspace.js';
import { sandboxResultContract, type SandboxResult } from '../../src/contracts/sandbox-result.js';
import { airlock } from '../helpers/cli.js';
import { descriptor } from '../helpers/descriptors.js';

// The FILE_* and DIRECTORY_* action types, each run for real through `airlock run`: Airlock's own
// primitive does the work inside the sandbox, the diff says exactly what it did, and the real tree
// never changes during the run.

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** A real tree outside /tmp (the sandbox has its own /tmp); files writable by the sandbox's host user. */
function tree(): string {
  const root = testScopeDir('prim-');
  chmodSync(root, 0o777);
  writeFileSync(join(root, 'notes.txt'), 'first line\n', { mode: 0o666 });
  mkdirSync(join(root, 'old'), { mode: 0o777 });
  chmodSync(join(root, 'old'), 0o777);
  writeFileSync(join(root, 'old', 'a.txt'), 'a\n', { mode: 0o666 });
  mkdirSync(join(root, 'old', 'deeper'), { mode: 0o777 });
  chmodSync(join(root, 'old', 'deeper'), 0o777);
  writeFileSync(join(root, 'old', 'deeper', 'b.txt'), 'b\n', { mode: 0o666 });
  return root;
}

/** Everything under `root`, with contents: what "the real tree never changed" compares. */
function listing(root: string): string[] {
  const out: string[] = [];
  const walk = (d: string) => {
    for (const n of readdirSync(d, { withFileTypes: true }).sort((a, b) => a.name.localeCompare(b.name))) {
      const p = join(d, n.name);
      if (n.isDirectory()) {
        out.push(`${p}/`);
        walk(p);
      } else out.push(`${p} ${sha(readFileSync(p))}`);
    }
  };
  walk(root);
  return out;
}

function run(root: string, over: Record<string, unknown>): { sr: SandboxResult; code: number | null; stderr: string } {
  const ws = scopedWorkspace().root;
  const file = join(root, '..', `${root.split('/').pop()}-${String(over.action_type).toLowerCase()}.json`);
  writeFileSync(file, JSON.stringify(descriptor(root, over)));
  const r = airlock(['run', file, '--workspace', ws, '--json']);
  assert.ok(r.stdout.length > 0, `no Sandbox Result (exit ${r.code}): ${r.stderr}`);
  const parsed = sandboxResultContract.parse(r.stdout);
  assert.ok(parsed.ok, JSON.stringify(!parsed.ok && parsed.problems));
  return { sr: parsed.value, code: r.code, stderr: r.stderr };
}

const fx = (create: string[], modify: string[], del: string[]) => ({ filesystem: { create, modify, delete: del }, network: false, system_state_change: false });
const nonRecursive = (root: string) => ({ filesystem: { paths: [root], recursive: false }, network: { required: false }, ui: { required: false } });

test('FILE_WRITE in a non-recursive scope: a new file with exactly the given bytes, PROMOTE; nothing real written', () => {
  const root = tree();
  const before = listing(root);
  const content = 'indent_size = 2\n';
  const { sr, code } = run(root, {
    action_type: 'FILE_WRITE',
    scope: nonRecursive(root),
    effects: fx([`${root}/.editorconfig`], [], []),
    write: { path: `${root}/.editorconfig`, content_base64: Buffer.from(content).toString('base64') },
  });
  assert.equal(code, 0);
  assert.equal(sr.verdict.recommended_action, 'PROMOTE', sr.verdict.reasons.join('; '));
  assert.equal(sr.compliance.within_scope, true);
  assert.deepEqual(sr.filesystem_diff.added.map((e) => [e.path, e.sha256_after]), [[`${root}/.editorconfig`, sha(content)]]);
  assert.deepEqual(listing(root), before);
});

test('FILE_MOVE: one deletion and one addition with the same hash, PROMOTE; the real file stays', () => {
  const root = tree();
  const before = listing(root);
  const { sr } = run(root, {
    action_type: 'FILE_MOVE',
    scope: nonRecursive(root),
    effects: fx([`${root}/renamed.txt`], [], [`${root}/notes.txt`]),
    move: { from: `${root}/notes.txt`, to: `${root}/renamed.txt` },
  });
  assert.equal(sr.verdict.recommended_action, 'PROMOTE', sr.verdict.reasons.join('; '));
  assert.deepEqual(sr.filesystem_diff.deleted.map((e) => [e.path, e.sha256_before]), [[`${root}/notes.txt`, sha('first line\n')]]);
  assert.deepEqual(sr.filesystem_diff.added.map((e) => [e.path, e.sha256_after]), [[`${root}/renamed.txt`, sha('first line\n')]]);
  assert.deepEqual(listing(root), before);
});

test('FILE_READ of one file (a one-file scope): the content comes back on stdout, no change, PROMOTE', () => {
  const root = tree();
  const target = join(root, 'notes.txt');
  const { sr, code } = run(root, {
    action_type: 'FILE_READ',
    risk_level: 'LOW',
    scope: { filesystem: { paths: [target], recursive: false }, network: { required: false }, ui: { required: false } },
    effects: fx([], [], []),
  });
  assert.equal(code, 0);
  assert.equal(sr.execution.status, 'SUCCESS', sr.execution.termination_reason);
  assert.equal(sr.outputs.stdout.text, 'first line\n');
  assert.deepEqual([sr.filesystem_diff.added, sr.filesystem_diff.modified, sr.filesystem_diff.deleted], [[], [], []]);
  assert.equal(sr.verdict.recommended_action, 'PROMOTE', sr.verdict.reasons.join('; '));
});

test('a one-file scope: a command that rewrites the file is seen as modified (hashes before and after); the real file is untouched', () => {
  const root = tree();
  const target = join(root, 'notes.txt');
  const { sr } = run(root, {
    action_type: 'COMMAND_EXECUTION',
    scope: { filesystem: { paths: [target], recursive: false }, network: { required: false }, ui: { required: false } },
    effects: fx([], [target], []),
    command: ['/bin/sh', '-c', `echo second >> ${target}; rm -f ${target}; echo gone-or-not`],
  });
  assert.deepEqual(sr.filesystem_diff.modified.map((e) => [e.path, e.sha256_before, e.sha256_after]), [[target, sha('first line\n'), sha('first line\nsecond\n')]]);
  assert.deepEqual(sr.filesystem_diff.deleted, [], 'the bound file cannot be deleted from inside');
  assert.equal(sr.verdict.recommended_action, 'PROMOTE', sr.verdict.reasons.join('; '));
  assert.equal(readFileSync(target, 'utf8'), 'first line\n');
});

test('DIRECTORY_CREATE: one new directory, PROMOTE; nothing real created', () => {
  const root = tree();
  const before = listing(root);
  const { sr } = run(root, { action_type: 'DIRECTORY_CREATE', scope: nonRecursive(root), effects: fx([`${root}/build`], [], []) });
  assert.equal(sr.verdict.recommended_action, 'PROMOTE', sr.verdict.reasons.join('; '));
  assert.deepEqual(sr.filesystem_diff.added.map((e) => [e.path, e.type]), [[`${root}/build`, 'dir']]);
  assert.deepEqual(listing(root), before);
});

test('DIRECTORY_DELETE of a non-empty directory: the directory and everything in it are reported deleted, and that is what was declared (PROMOTE)', () => {
  const root = tree();
  const before = listing(root);
  const { sr } = run(root, { action_type: 'DIRECTORY_DELETE', effects: fx([], [], [`${root}/old`]) });
  assert.equal(sr.verdict.recommended_action, 'PROMOTE', sr.verdict.reasons.join('; '));
  assert.deepEqual(sr.filesystem_diff.deleted.map((e) => e.path).sort(), [`${root}/old`, `${root}/old/a.txt`, `${root}/old/deeper`, `${root}/old/deeper/b.txt`]);
  assert.deepEqual(listing(root), before);
});

test('a non-recursive scope covers its direct children only: a write two levels down is outside it (BLOCK)', () => {
  const root = tree();
  const { sr } = run(root, {
    action_type: 'COMMAND_EXECUTION',
    scope: nonRecursive(root),
    effects: fx([`${root}/top.txt`], [], []),
    command: ['/bin/sh', '-c', `echo t > ${root}/top.txt; echo d > ${root}/old/deeper/sneaky.txt`],
  });
  assert.equal(sr.verdict.recommended_action, 'BLOCK');
  assert.equal(sr.compliance.within_scope, false);
  assert.ok(sr.verdict.reasons.some((r) => r.includes(`added ${root}/old/deeper/sneaky.txt is outside the declared scope`)), sr.verdict.reasons.join('; '));
  assert.ok(!sr.verdict.reasons.some((r) => r.includes(`${root}/top.txt is outside`)), 'the direct child is inside the scope');
});

test('the disk limit covers writes into a scope: 20 MB against max_disk_mb 1 fails to write, and the run is BLOCKed as over its limits', () => {
  const root = tree();
  const before = listing(root);
  const { sr } = run(root, {
    action_type: 'COMMAND_EXECUTION',
    resources: { max_cpu_ms: 20000, max_memory_mb: 256, max_disk_mb: 1, max_duration_ms: 60000 },
    effects: fx([`${root}/big.bin`], [], []),
    command: ['/usr/bin/dd', 'if=/dev/zero', `of=${root}/big.bin`, 'bs=1M', 'count=20'],
  });
  assert.equal(sr.verdict.recommended_action, 'BLOCK');
  assert.equal(sr.compliance.resources_within_limits, false);
  const written = sr.filesystem_diff.added.find((e) => e.path === `${root}/big.bin`);
  assert.ok(written && (written.size_bytes ?? Infinity) <= 1024 * 1024, `at most the limit landed in the scope (${written?.size_bytes} bytes)`);
  assert.ok(sr.verdict.reasons.some((r) => /resource limits exceeded \(outBytes\)/.test(r)), sr.verdict.reasons.join('; '));
  assert.deepEqual(listing(root), before);
});
