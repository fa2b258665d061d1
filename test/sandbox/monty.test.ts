// The Monty lane with real Monty in real child processes: limits, /in and /out, isolation.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { existsSync, mkdirSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Action, ActionLimits } from '../../src/action/action.js';
import { runInMontyLane, type MontyLaneOptions, type MontyRunObservation } from '../../src/sandbox/lanes/monty.js';

const sha = (s: string | Buffer): string => createHash('sha256').update(s).digest('hex');
const base = mkdtempSync(join(tmpdir(), 'airlock-monty-test-'));
const inputsDir = join(base, 'inputs');
after(() => rmSync(base, { recursive: true, force: true }));
const CSV = 'name,qty\napple,3\npear,4\n';
// A file beside the inputs that the request did not declare: it must not be visible at /in.
const SECRET = 'not-declared';
mkdirSync(inputsDir);
writeFileSync(join(inputsDir, 'data.csv'), CSV);
writeFileSync(join(inputsDir, 'undeclared.txt'), SECRET);

const LIMITS: ActionLimits = { wallMs: 5000, cpuMs: 5000, memoryBytes: 64 << 20, diskBytes: 1 << 20, files: 1000, pids: 64, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 };

function action(code: string, more: { limits?: Partial<ActionLimits>; inputs?: Action['inputs'] } = {}): Action {
  return {
    id: 'TR-20260211-140000Z-monty-test',
    source: 'tool-request',
    kind: 'TEST',
    preconditions: { pathsExist: [], networkAvailable: false, userIdle: false },
    cooldownOnRepeat: false,
    lane: 'monty',
    run: { kind: 'code', language: 'python', code },
    inputs: more.inputs ?? [],
    outputsExpected: [],
    scope: { paths: [], recursive: false },
    effects: { create: ['/out/*'], modify: [], delete: [], network: false, systemStateChange: false },
    limits: { ...LIMITS, ...more.limits },
    network: { mode: 'none', allowlist: [] },
    risk: 'LOW',
    confirmationRequired: false,
    rollbackSupported: true,
    sandboxRequired: true,
    display: `monty: ${code.split('\n')[0]}`,
  };
}

let outN = 0;
const freshOut = (): string => join(base, `out-${++outN}`);

async function monty(code: string, more: { limits?: Partial<ActionLimits>; inputs?: Action['inputs']; outDir?: string; opts?: MontyLaneOptions } = {}): Promise<MontyRunObservation> {
  const r = await runInMontyLane(action(code, more), { inputsDir, outDir: more.outDir ?? freshOut() }, more.opts);
  assert.ok(r.ok, JSON.stringify(!r.ok && r.problems));
  return r.observation as MontyRunObservation;
}

const text = (o: MontyRunObservation): string => `status=${o.status} reason=${o.reason} exit=${JSON.stringify(o.exit)} stdout=${o.stdout.bytes.toString().slice(0, 300)} stderr=${o.stderr.bytes.toString().slice(0, 600)}`;
const alive = (pid: number | null): boolean => {
  if (pid === null) return false;
  try {
    process.kill(pid, 0);
    return true;
  } catch {
    return false;
  }
};
const dataInput = [{ name: 'data.csv', sha256: sha(CSV) }];

test('a trivial program succeeds: print captured, last value returned, parent-measured figures', async () => {
  const o = await monty('print("hello", 2)\n1 + 1');
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.deepEqual(o.exit, { code: 0, signal: null, source: 'monty-worker' });
  assert.equal(o.stdout.bytes.toString(), 'hello 2\n');
  assert.equal(o.stdout.sha256, sha('hello 2\n'));
  assert.equal(o.stdout.truncated, false);
  assert.equal(o.stderr.totalBytes, 0);
  assert.equal(o.monty.resultJson, '2');
  assert.deepEqual(o.limitsExceeded, []);
  assert.deepEqual(o.fs, { out: [], scopes: [] });
  assert.deepEqual(o.problems, []);
  for (const k of ['cpuUserMs', 'cpuSystemMs', 'peakMemoryBytes', 'diskWriteBytes', 'wallMs'] as const) assert.equal(typeof o.resources[k], 'number', `${k} measured`);
  assert.ok((o.resources.peakMemoryBytes ?? 0) > 10 << 20, 'peak RSS is the child node process');
  assert.equal(o.resources.networkBytesOut, 0);
  assert.match(o.resources.basis.networkBytesOut ?? '', /by construction/);
  assert.equal(o.sideEffects?.processesSpawned.count, 0);
  assert.deepEqual(o.sideEffects?.networkAttempts, []);
  assert.equal(o.host.bwrapVersion, 'n/a (monty)');
  assert.equal(o.host.seccomp, false);
  assert.ok(o.host.limits.every((l) => l.enforcedBy !== null));
  assert.equal(o.monty.isolation.isolatedChild, true);
  assert.ok(o.monty.isolation.childPid !== null && o.monty.isolation.childPid !== process.pid);
  assert.equal(alive(o.monty.isolation.childPid), false, 'the child is gone when the run returns');
});

test('/in holds the declared inputs read-only, /out receives files reported with their sha256', async () => {
  const outDir = freshOut();
  const code = [
    'from pathlib import Path',
    'rows = Path("/in/data.csv").read_text().splitlines()[1:]',
    'total = sum(int(r.split(",")[1]) for r in rows)',
    'Path("/out/total.txt").write_text(str(total))',
    'Path("/out/sub").mkdir()',
    'with open("/out/sub/copy.csv", "w") as f:',
    '    f.write(open("in/data.csv").read())',
    'sorted(str(p) for p in Path("/in").iterdir())',
  ].join('\n');
  const o = await monty(code, { inputs: dataInput, outDir });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.deepEqual(o.inputs, [{ name: 'data.csv', sha256: sha(CSV), bytes: CSV.length }]);
  assert.equal(o.monty.resultJson, '["/in/data.csv"]', 'only declared inputs are visible');
  assert.deepEqual(
    o.fs.out?.map((c) => [c.change, c.path, c.type, c.sha256After]),
    [
      ['added', '/out/sub', 'dir', undefined],
      ['added', '/out/sub/copy.csv', 'file', sha(CSV)],
      ['added', '/out/total.txt', 'file', sha('7')],
    ],
  );
  assert.equal(readFileSync(join(outDir, 'total.txt'), 'utf8'), '7');
  assert.equal(o.resources.diskWriteBytes, 1 + CSV.length);

  const ro = await monty('open("/in/data.csv", "w").write("x")', { inputs: dataInput });
  assert.equal(ro.status, 'FAILURE', text(ro));
  assert.match(ro.stderr.bytes.toString(), /Read-only file system/);
  assert.equal(readFileSync(join(inputsDir, 'data.csv'), 'utf8'), CSV);
});

test('paths outside /in and /out are refused inside Monty, `..` included', async () => {
  for (const p of ['/etc/passwd', '/in/../etc/passwd', '/out/../../etc/hostname', `${inputsDir}/undeclared.txt`, '/in/undeclared.txt']) {
    const o = await monty(`open(${JSON.stringify(p)}).read()`, { inputs: dataInput });
    assert.equal(o.status, 'FAILURE', `${p}: ${text(o)}`);
    assert.equal(o.exit.code, 1);
    assert.match(o.stderr.bytes.toString(), /(PermissionError|FileNotFoundError)/, p);
    assert.equal(o.monty.resultJson, null);
    assert.ok(!o.stderr.bytes.toString().includes(SECRET) && !o.stdout.bytes.toString().includes('root:'), p);
  }
  const w = await monty('open("/tmp/x", "w").write("x")');
  assert.equal(w.status, 'FAILURE', text(w));
  assert.match(w.stderr.bytes.toString(), /PermissionError/);
});

test('no environment, network or subprocess: Monty has no such API', async () => {
  for (const code of ['import os\nos.getenv("HOME")', 'import socket', 'import subprocess']) {
    const o = await monty(code);
    assert.equal(o.status, 'FAILURE', `${code}: ${text(o)}`);
    assert.match(o.stderr.bytes.toString(), /(not supported|No module named)/, code);
  }
});

test('an infinite loop is killed at the wall time (TIMEOUT) and the service carries on', async () => {
  const o = await monty('while True:\n    pass', { limits: { wallMs: 800, cpuMs: 10_000 } });
  assert.equal(o.status, 'TIMEOUT', text(o));
  assert.ok(o.limitsExceeded.includes('wallMs'));
  assert.ok(o.wallMs >= 700 && o.wallMs < 3000, `wall ${o.wallMs}`);
  assert.equal(alive(o.monty.isolation.childPid), false);
  assert.ok((o.resources.cpuUserMs ?? 0) > 100, 'the loop burned CPU the host saw');
  const after = await monty('"still here"');
  assert.equal(after.status, 'SUCCESS', text(after));
});

test('an abort signal (a caller\'s cancel) kills the Monty child at once: POLICY_ABORTED, canceled by the caller', async () => {
  const ac = new AbortController();
  const t = setTimeout(() => ac.abort(), 500);
  const r = await runInMontyLane(action('while True:\n    pass', { limits: { wallMs: 30_000, cpuMs: 30_000 } }), { inputsDir, outDir: freshOut(), signal: ac.signal });
  clearTimeout(t);
  assert.ok(r.ok);
  const o = r.observation as MontyRunObservation;
  assert.equal(o.status, 'POLICY_ABORTED', text(o));
  assert.match(o.reason, /canceled by the caller/);
  assert.deepEqual(o.limitsExceeded, []);
  assert.ok(o.wallMs < 5000, `wall ${o.wallMs}`);
  assert.equal(alive(o.monty.isolation.childPid), false);
  // Already aborted before the run: the child is killed at once.
  const pre = await runInMontyLane(action('1'), { inputsDir, outDir: freshOut(), signal: AbortSignal.abort() });
  assert.ok(pre.ok);
  assert.equal(pre.observation.status, 'POLICY_ABORTED');
});

test('CPU time over cpuMs is measured by the host and killed (RESOURCE_KILLED)', async () => {
  const o = await monty('x = 0\nwhile True:\n    x += 1', { limits: { wallMs: 10_000, cpuMs: 300 } });
  assert.equal(o.status, 'RESOURCE_KILLED', text(o));
  assert.deepEqual(o.limitsExceeded, ['cpuMs']);
  assert.ok(o.wallMs < 5000, `killed early: ${o.wallMs}`);
});

test('memory bombs are stopped and reported as the memory limit', async () => {
  for (const code of ['x = []\nwhile True:\n    x.append("a" * 100000)', 's = "a" * (10 ** 10)', 'x = [0] * (10 ** 9)']) {
    const o = await monty(code, { limits: { memoryBytes: 32 << 20 } });
    assert.equal(o.status, 'RESOURCE_KILLED', `${code}: ${text(o)}`);
    assert.deepEqual(o.limitsExceeded, ['memoryBytes']);
    assert.ok((o.resources.peakMemoryBytes ?? Infinity) < 512 << 20, `peak ${o.resources.peakMemoryBytes}`);
  }
  // Monty's memory error cannot be caught by the program.
  const c = await monty('try:\n    s = "a" * (10 ** 10)\nexcept MemoryError:\n    print("caught")\n"after"', { limits: { memoryBytes: 32 << 20 } });
  assert.equal(c.status, 'RESOURCE_KILLED', text(c));
  assert.equal(c.stdout.totalBytes, 0);
});

test('deep recursion hits the recursion limit (a Python RecursionError, exit 1)', async () => {
  const o = await monty('def f(n):\n    return f(n + 1)\nf(0)');
  assert.equal(o.status, 'FAILURE', text(o));
  assert.equal(o.exit.code, 1);
  assert.match(o.stderr.bytes.toString(), /RecursionError: maximum recursion depth exceeded/);
  assert.equal(o.monty.exception?.typeName, 'RecursionError');
  const low = await monty('def f(n):\n    return 0 if n == 0 else f(n - 1)\nf(100)', { opts: { maxRecursionDepth: 50 } });
  assert.equal(low.status, 'FAILURE', text(low));
  const ok = await monty('def f(n):\n    return 0 if n == 0 else f(n - 1)\nf(40)', { opts: { maxRecursionDepth: 50 } });
  assert.equal(ok.status, 'SUCCESS', text(ok));
});

test('a Python exception gives exit 1 with its traceback on stderr; a syntax error too', async () => {
  const o = await monty('def g():\n    raise ValueError("boom")\nprint("before")\ng()');
  assert.equal(o.status, 'FAILURE', text(o));
  assert.deepEqual(o.exit, { code: 1, signal: null, source: 'monty-worker' });
  assert.equal(o.stdout.bytes.toString(), 'before\n');
  const err = o.stderr.bytes.toString();
  assert.match(err, /^Traceback \(most recent call last\):/);
  assert.match(err, /File "main.py", line 2, in g/);
  assert.match(err, /ValueError: boom\n$/);
  assert.equal(o.stderr.sha256, sha(o.stderr.bytes));
  assert.deepEqual(o.limitsExceeded, []);
  const s = await monty('def (:');
  assert.equal(s.status, 'FAILURE', text(s));
  assert.equal(s.exit.code, 1);
  assert.match(s.stderr.bytes.toString(), /SyntaxError/);
});

test('writing past the /out cap fails inside Monty and the observation names outBytes', async () => {
  const outDir = freshOut();
  const o = await monty('from pathlib import Path\nPath("/out/a.txt").write_text("x" * 60)\nPath("/out/b.txt").write_text("y" * 60)', { limits: { diskBytes: 100 }, outDir });
  assert.equal(o.status, 'FAILURE', text(o));
  assert.deepEqual(o.limitsExceeded, ['outBytes']);
  assert.match(o.stderr.bytes.toString(), /OSError: disk write limit of 100 bytes exceeded/);
  assert.equal(readFileSync(join(outDir, 'a.txt'), 'utf8'), 'x'.repeat(60));
  assert.equal(existsSync(join(outDir, 'b.txt')) ? readFileSync(join(outDir, 'b.txt'), 'utf8').length : 0, 0, 'the refused write left nothing');
  assert.ok((o.resources.diskWriteBytes ?? Infinity) <= 100);
});

test('stdout and stderr are capped, counted and hashed like the ns lane', async () => {
  const o = await monty('print("z" * 1000)\nraise RuntimeError("e" * 500)', { limits: { stdoutBytes: 100, stderrBytes: 64 } });
  assert.equal(o.stdout.bytes.length, 100);
  assert.equal(o.stdout.totalBytes, 1001);
  assert.equal(o.stdout.truncated, true);
  assert.equal(o.stdout.sha256, sha('z'.repeat(1000) + '\n'));
  assert.equal(o.stderr.bytes.length, 64);
  assert.ok(o.stderr.totalBytes > 500 && o.stderr.truncated);
  assert.deepEqual(o.limitsExceeded, []);
});

test('a child that dies before the program starts is a SANDBOX_ERROR; one that dies during it, a FAILURE', async () => {
  const early = join(base, 'early-worker.mjs');
  writeFileSync(early, 'process.stderr.write("cannot load monty\\n"); process.exit(7);\n');
  const a = await monty('1', { opts: { workerPath: early } });
  assert.equal(a.status, 'SANDBOX_ERROR', text(a));
  assert.equal(a.problems[0]?.code, 'MONTY_CHILD_FAILED');
  assert.match(a.reason, /cannot load monty/);
  assert.equal(a.monty.isolation.isolatedChild, false);

  const crash = join(base, 'crash-worker.mjs');
  writeFileSync(crash, 'import { writeSync } from "node:fs"; writeSync(3, JSON.stringify({ t: "start" }) + "\\n"); setTimeout(() => process.abort(), 50);\n');
  const b = await monty('1', { opts: { workerPath: crash } });
  assert.equal(b.status, 'FAILURE', text(b));
  assert.equal(b.exit.signal, 'SIGABRT');
  assert.match(b.reason, /died while the program ran/);

  // Memory Monty does not account for (native or V8) is still bounded: the host watches the child's RSS.
  const hog = join(base, 'hog-worker.mjs');
  writeFileSync(hog, 'import { writeSync } from "node:fs"; writeSync(3, JSON.stringify({ t: "start" }) + "\\n"); const keep = []; setInterval(() => keep.push(Buffer.alloc(16 << 20, 1)), 5);\n');
  const h = await monty('1', { limits: { memoryBytes: 32 << 20, wallMs: 10_000 }, opts: { workerPath: hog } });
  assert.equal(h.status, 'RESOURCE_KILLED', text(h));
  assert.deepEqual(h.limitsExceeded, ['memoryBytes']);
  assert.match(h.reason, /RSS grew/);

  const liar = join(base, 'liar-worker.mjs');
  writeFileSync(liar, 'import { writeSync } from "node:fs"; writeSync(3, "not json\\n"); setInterval(() => {}, 1000);\n');
  const c = await monty('1', { opts: { workerPath: liar } });
  assert.equal(c.status, 'SANDBOX_ERROR', text(c));
  assert.equal(alive(c.monty.isolation.childPid), false);
});

test('refusals before anything runs: wrong action kind, bad limits, changed input, used outDir', async () => {
  const argv = await runInMontyLane({ ...action('1'), run: { kind: 'argv', argv: ['true'] } }, { inputsDir, outDir: freshOut() });
  assert.equal(argv.ok, false);
  assert.equal(!argv.ok && argv.problems[0]?.code, 'LANE_ACTION_NOT_RUNNABLE');

  const bad = await monty('1', { limits: { wallMs: 0, memoryBytes: 1.5 } });
  assert.equal(bad.status, 'SANDBOX_ERROR');
  assert.deepEqual(bad.problems.map((p) => [p.code, p.path]), [['MONTY_LIMIT_INVALID', 'limits.wallMs'], ['MONTY_LIMIT_INVALID', 'limits.memoryBytes']]);

  const changed = await monty('1', { inputs: [{ name: 'data.csv', sha256: sha('other') }] });
  assert.equal(changed.problems[0]?.code, 'MONTY_INPUT_CHANGED');
  const missing = await monty('1', { inputs: [{ name: 'nope.csv', sha256: sha('') }] });
  assert.equal(missing.problems[0]?.code, 'MONTY_INPUT_UNREADABLE');
  const name = await monty('1', { inputs: [{ name: '../data.csv', sha256: sha(CSV) }] });
  assert.equal(name.problems[0]?.code, 'MONTY_INPUT_NAME');

  const used = freshOut();
  mkdirSync(used);
  writeFileSync(join(used, 'old'), 'x');
  const u = await monty('1', { outDir: used });
  assert.equal(u.problems[0]?.code, 'MONTY_OUTDIR');
  const r = await monty('1', { opts: { maxRecursionDepth: 1_000_000 } });
  assert.equal(r.problems[0]?.code, 'MONTY_LIMIT_INVALID');
});

test('p50 of a trivial program through runInMontyLane (50 runs)', async (t) => {
  const times: number[] = [];
  for (let i = 0; i < 50; i++) {
    const t0 = performance.now();
    const o = await monty('1 + 1');
    times.push(performance.now() - t0);
    assert.equal(o.status, 'SUCCESS', text(o));
  }
  times.sort((a, b) => a - b);
  const p50 = times[24]!;
  const p90 = times[44]!;
  t.diagnostic(`monty lane trivial program: p50 ${p50.toFixed(1)} ms, p90 ${p90.toFixed(1)} ms, min ${times[0]!.toFixed(1)} ms (50 runs)`);
  assert.ok(p50 < 2000, `p50 ${p50} ms`);
});
