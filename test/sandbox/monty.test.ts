// The Monty lane with real Monty in real, sandboxed worker processes (bwrap, seccomp, cgroup, uid
// nobody when root): limits, /in and /out, isolation between runs, crashes and a hostile worker.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { createHash } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, readlinkSync, rmSync, symlinkSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Action, ActionLimits } from '../../src/action/action.js';
import { judge } from '../../src/judge/judge.js';
import { montyWorkerPath, runInMontyLane, type MontyLaneOptions, type MontyRunObservation } from '../../src/sandbox/lanes/monty.js';
import { closeMontyPools, montyPool } from '../../src/sandbox/lanes/monty-pool.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';
import { RUN_ID_RANGE } from '../../src/sandbox/run-ids.js';

const sha = (s: string | Buffer): string => createHash('sha256').update(s).digest('hex');
const base = mkdtempSync(join(tmpdir(), 'airlock-monty-test-'));
// Test workers are bound into the sandbox from here: the sandbox's host user must be able to read them.
chmodSync(base, 0o755);
const inputsDir = join(base, 'inputs');
after(async () => {
  await closeMontyPools();
  rmSync(base, { recursive: true, force: true });
});
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
/** Waits (up to 2 s) for a killed process to be reaped: right after a kill it can still be a zombie. */
async function gone(pid: number | null): Promise<boolean> {
  for (let i = 0; i < 100 && alive(pid); i++) await new Promise((r) => setTimeout(r, 20));
  return !alive(pid);
}
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
  assert.ok(o.host.limits.every((l) => l.enforcedBy !== null));
  assert.equal(o.monty.isolation.isolatedChild, true);
  assert.equal(o.monty.isolation.freshInterpreter, true);
  assert.ok(o.monty.isolation.childPid !== null && o.monty.isolation.childPid !== process.pid);
  assert.equal(alive(o.monty.isolation.childPid), true, 'the worker stays, warm, for the next run');
  // The worker's own sandbox, as the host set it up (root here: uid nobody, a cgroup).
  const sb = o.monty.isolation.sandbox;
  assert.ok(sb, 'the worker ran in its sandbox');
  assert.equal(o.host.seccomp, true);
  assert.match(o.host.bwrapVersion, /^\d/);
  assert.match(sb.network, /empty network namespace/);
  if (process.getuid?.() === 0) {
    const own = sb.hostUid;
    assert.ok(sb.hostIds === 'own' && own >= RUN_ID_RANGE.first && own < RUN_ID_RANGE.first + RUN_ID_RANGE.count, `the worker's own uid: ${own}`);
    assert.equal(readFileSync(`/proc/${o.monty.isolation.childPid}/status`, 'utf8').match(/^Uid:\s+(\d+)/m)?.[1], String(own), 'the worker process runs as its own uid on the host');
    assert.ok(sb.cgroup?.memory && sb.cgroup.pids !== null);
  }
  const j = judge(action('1'), o);
  assert.equal(j.compliance.sandbox_requirements_met, true, JSON.stringify(j));
  // A worker without its OS sandbox (a host without bwrap) never meets the sandbox requirement.
  const bare = judge(action('1'), { ...o, monty: { ...o.monty, isolation: { ...o.monty.isolation, sandbox: null, unsandboxedReason: 'no bwrap' } } } as MontyRunObservation);
  assert.equal(bare.compliance.sandbox_requirements_met, false);
  assert.ok(bare.reasons.some((r) => /without its OS sandbox/.test(r)), JSON.stringify(bare.reasons));
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
  assert.ok(await gone(o.monty.isolation.childPid));
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
  assert.ok(await gone(o.monty.isolation.childPid));
  // Already aborted before the run: the child is killed at once.
  const pre = await runInMontyLane(action('1'), { inputsDir, outDir: freshOut(), signal: AbortSignal.abort() });
  assert.ok(pre.ok);
  assert.equal(pre.observation.status, 'POLICY_ABORTED');
});

test('a run folder that could not be made stops a Monty run before its program starts (MONTY_OUTDIR, no /out folder)', async () => {
  const outDir = join(base, 'unmade-run', 'out');
  const parent = Promise.reject(Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' }));
  const r = await runInMontyLane(action('print("ran")'), { inputsDir, outDir, outDirParent: parent });
  assert.ok(r.ok);
  const o = r.observation as MontyRunObservation;
  assert.equal(o.status, 'SANDBOX_ERROR', text(o));
  assert.equal(o.problems[0]?.code, 'MONTY_OUTDIR');
  assert.match(o.reason, /EACCES/);
  assert.equal(o.stdout.bytes.length, 0, 'the program did not run');
  assert.equal(existsSync(outDir), false);
});

test('/out on the host is made only when the program leaves something there; a link or a used folder is refused before the run', async () => {
  const empty = freshOut();
  const e = await monty('print("nothing in /out")', { outDir: empty });
  assert.equal(e.status, 'SUCCESS', text(e));
  assert.deepEqual(e.fs.out, []);
  assert.equal(existsSync(empty), false, 'no folder for an empty /out');

  const full = freshOut();
  const f = await monty('open("/out/x.txt", "w").write("x")', { outDir: full });
  assert.equal(f.status, 'SUCCESS', text(f));
  assert.deepEqual(readFileSync(join(full, 'x.txt'), 'utf8'), 'x');
  assert.deepEqual(f.fs.out?.map((c) => c.path), ['/out/x.txt']);

  const victim = mkdtempSync(join(tmpdir(), 'airlock-monty-victim-'));
  const link = freshOut();
  symlinkSync(victim, link);
  const l = await monty('open("/out/x.txt", "w").write("x")', { outDir: link });
  assert.equal(l.problems[0]?.code, 'MONTY_OUTDIR', text(l));
  assert.equal(l.stdout.bytes.length + l.stderr.bytes.length, 0, 'the program did not run');
  assert.deepEqual(readdirSync(victim), [], 'nothing was written through the link');
});

test('a host that cannot make the /out folder says so and blocks the diff; the worker is not blamed', async () => {
  const parent = join(freshOut(), 'gone');
  mkdirSync(parent, { recursive: true });
  const outDir = join(parent, 'out');
  const running = runInMontyLane(action('open("/out/x.txt", "w").write("x")'), { inputsDir, outDir });
  // After the lane's check (microtasks), before the worker's first frame can arrive (I/O): the place
  // where /out's folder goes becomes a file.
  setImmediate(() => {
    rmSync(parent, { recursive: true });
    writeFileSync(parent, 'a file now');
  });
  const r = await running;
  assert.ok(r.ok);
  const o = r.observation as MontyRunObservation;
  assert.equal(o.status, 'SUCCESS', `the program ran to its end: ${text(o)}`);
  assert.equal(o.fs.out, null, 'the /out diff cannot be verified');
  assert.match(o.fs.outError ?? '', /could not make .*gone\/out/);
  assert.doesNotMatch(o.reason, /protocol/);
  const next = await monty('1');
  assert.equal(next.monty.isolation.childPid, o.monty.isolation.childPid, 'the same worker serves the next run');
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

// A stand-in worker speaks the frame protocol (monty-protocol.ts) by hand: `onGo(job => ...)` runs at
// the host's go. It is started by the same pool, in the same sandbox, as the real worker.
const WORKER_HEAD = `
import { writeSync } from 'node:fs';
const frame = (t, p = '') => { const b = Buffer.from(p); const h = Buffer.alloc(5); h.write(t, 0, 1, 'latin1'); h.writeUInt32BE(b.length, 1); writeSync(1, Buffer.concat([h, b])); };
let buf = Buffer.alloc(0); let job = null; let go = () => {};
const onGo = (fn) => { go = fn; };
process.stdin.on('data', (c) => { buf = Buffer.concat([buf, c]); while (buf.length >= 5) { const n = buf.readUInt32BE(1); if (buf.length < 5 + n) break; const t = buf.toString('latin1', 0, 1); const p = buf.subarray(5, 5 + n); buf = buf.subarray(5 + n); if (t === 'J') job = JSON.parse(p.toString()); if (t === 'G') go(job); } });
process.stdin.on('end', () => process.exit(0));
const ready = () => frame('r', JSON.stringify({ pid: process.pid }));
`;
function testWorker(name: string, body: string): string {
  const p = join(base, `${name}.mjs`);
  writeFileSync(p, WORKER_HEAD + body, { mode: 0o644 });
  return p;
}

test('a worker that dies before the program starts is a SANDBOX_ERROR; one that dies during it, a FAILURE; the next run gets a new worker', async () => {
  const early = testWorker('early-worker', 'process.stderr.write("cannot load monty\\n"); process.exit(7);\n');
  const a = await monty('1', { opts: { workerPath: early } });
  assert.equal(a.status, 'SANDBOX_ERROR', text(a));
  assert.equal(a.problems[0]?.code, 'MONTY_CHILD_FAILED');
  assert.match(a.reason, /cannot load monty/);
  assert.equal(a.monty.isolation.isolatedChild, false);

  const crash = testWorker('crash-worker', 'ready(); onGo(() => { frame("s"); setTimeout(() => process.abort(), 50); });\n');
  const b = await monty('1', { opts: { workerPath: crash } });
  assert.equal(b.status, 'FAILURE', text(b));
  assert.equal(b.exit.signal, 'SIGABRT');
  assert.match(b.reason, /died while the program ran/);
  const b2 = await monty('1', { opts: { workerPath: crash } });
  assert.notEqual(b2.monty.isolation.childPid, b.monty.isolation.childPid, 'a new worker for the next run');

  // Memory Monty does not account for (native or V8) is still bounded: the worker's cgroup (or, without one, the host's RSS poll).
  const hog = testWorker('hog-worker', 'ready(); onGo(() => { frame("s"); const keep = []; setInterval(() => keep.push(Buffer.alloc(16 << 20, 1)), 5); });\n');
  const h = await monty('1', { limits: { memoryBytes: 32 << 20, wallMs: 10_000 }, opts: { workerPath: hog } });
  assert.equal(h.status, 'RESOURCE_KILLED', text(h));
  assert.deepEqual(h.limitsExceeded, ['memoryBytes']);
  assert.match(h.reason, /OOM-killed the worker|RSS grew/);
  assert.ok((h.resources.peakMemoryBytes ?? 0) < 512 << 20, `peak ${h.resources.peakMemoryBytes}`);

  const liar = testWorker('liar-worker', 'ready(); onGo(() => { writeSync(1, "not a frame\\n"); setInterval(() => {}, 1000); });\n');
  const c = await monty('1', { opts: { workerPath: liar } });
  assert.equal(c.status, 'SANDBOX_ERROR', text(c));
  assert.match(c.reason, /broke the protocol/);
  assert.ok(await gone(c.monty.isolation.childPid));

  // /out paths from the worker are checked before the host writes anything.
  const escape = testWorker('out-escape-worker', 'ready(); onGo(() => { frame("s"); frame("f", "../../../tmp/airlock-monty-escaped"); frame("c", "x"); frame("x", JSON.stringify({ t: "end", ok: true, resultJson: null, resultTruncated: false, outSkipped: 0 })); });\n');
  const e = await monty('1', { opts: { workerPath: escape } });
  assert.equal(e.status, 'SANDBOX_ERROR', text(e));
  assert.match(e.reason, /invalid \/out path/);
  assert.equal(existsSync('/tmp/airlock-monty-escaped'), false);
});

test('a worker killed with SIGKILL mid-run: the run is a FAILURE, the next run gets a fresh worker', async () => {
  const first = await monty('1');
  const pid = first.monty.isolation.childPid!;
  const running = monty('while True:\n    pass', { limits: { wallMs: 20_000, cpuMs: 20_000 } });
  await new Promise((r) => setTimeout(r, 300));
  process.kill(pid, 'SIGKILL');
  const o = await running;
  assert.equal(o.status, 'FAILURE', text(o));
  assert.equal(o.exit.signal, 'SIGKILL');
  assert.match(o.reason, /died while the program ran/);
  assert.equal(o.monty.isolation.childPid, pid);
  const next = await monty('"fresh"');
  assert.equal(next.status, 'SUCCESS', text(next));
  assert.notEqual(next.monty.isolation.childPid, pid);
  assert.equal(next.monty.isolation.worker?.runIndex, 1);
});

test('no state passes from one run to the next on the same worker: globals, /in, /out, the last result', async () => {
  const a = await monty('from pathlib import Path\nsecret = "s3cr3t"\nPath("/out/left.txt").write_text(secret)\nprint(len(Path("/in/data.csv").read_text()))\nsecret', { inputs: dataInput });
  assert.equal(a.status, 'SUCCESS', text(a));
  assert.equal(a.monty.resultJson, '"s3cr3t"');
  const probe = [
    'from pathlib import Path',
    'found = []',
    'try:',
    '    found.append(secret)',
    'except NameError:',
    '    pass',
    'for p in ["/out/left.txt", "/in/data.csv", "/w/1/out/left.txt", "/w/2/out/left.txt", "/out/../1/out/left.txt"]:',
    '    try:',
    '        found.append(open(p).read())',
    '    except Exception:',
    '        pass',
    'try:',
    '    found.append(sorted(str(p) for p in Path("/out").iterdir()))',
    'except Exception:',
    '    pass',
    'found',
  ].join('\n');
  const b = await monty(probe);
  assert.equal(b.status, 'SUCCESS', text(b));
  assert.equal(b.monty.isolation.childPid, a.monty.isolation.childPid, 'the same warm worker');
  assert.equal(b.monty.isolation.worker?.runIndex, (a.monty.isolation.worker?.runIndex ?? 0) + 1);
  assert.equal(b.monty.resultJson, '[[]]', 'nothing of the first run is visible: no global, no /in, an empty /out');
  assert.deepEqual(b.fs.out, []);
  // A run with inputs sees its own inputs only.
  writeFileSync(join(inputsDir, 'other.txt'), 'other');
  const c = await monty('from pathlib import Path\nsorted(str(p) for p in Path("/in").iterdir())', { inputs: [{ name: 'other.txt', sha256: sha('other') }] });
  assert.equal(c.monty.resultJson, '["/in/other.txt"]');
});

test('a run that leaves 40,000 folders in /out pays for their removal itself: the next run on the same worker is not slowed (a 200 ms wall limit holds)', async () => {
  // Empty folders cost nothing against the /out byte cap; the worker removes them after the run.
  const a = await monty('from pathlib import Path\nn = 0\nwhile n < 40000:\n    Path("/out/d" + str(n)).mkdir()\n    n += 1\nn', { limits: { files: 50, wallMs: 20_000, cpuMs: 20_000 } });
  assert.equal(a.monty.resultJson, '40000', text(a));
  assert.ok(a.limitsExceeded.includes('files'), text(a));
  const b = await monty('print("next run")', { limits: { wallMs: 200 } });
  assert.equal(b.monty.isolation.childPid, a.monty.isolation.childPid, 'the same warm worker');
  assert.equal(b.status, 'SUCCESS', text(b));
  assert.equal(b.stdout.bytes.toString(), 'next run\n');
});

test('an error Monty raises for what the program asked (an unknown function such as dir()) is the program\'s FAILURE, not a host error', async () => {
  const o = await monty('print("did my work")\ndir()');
  assert.equal(o.status, 'FAILURE', text(o));
  assert.equal(o.monty.exception?.kind, 'unsupported', text(o));
  assert.match(o.reason, /^Monty could not run what the program asked for \(.*dir/, text(o));
  assert.equal(o.stdout.bytes.toString(), 'did my work\n');
});

test('per-run limits hold on a warm worker: a breach ends that worker, the next run gets a new one', async () => {
  const warm = await monty('1');
  const cpu = await monty('x = 0\nwhile True:\n    x += 1', { limits: { wallMs: 10_000, cpuMs: 300 } });
  assert.equal(cpu.status, 'RESOURCE_KILLED', text(cpu));
  assert.deepEqual(cpu.limitsExceeded, ['cpuMs']);
  assert.equal(cpu.monty.isolation.childPid, warm.monty.isolation.childPid, 'the warm worker ran it');
  assert.ok(await gone(cpu.monty.isolation.childPid), 'and was ended with the run');
  const mem = await monty('s = "a" * (10 ** 9)', { limits: { memoryBytes: 32 << 20 } });
  assert.equal(mem.status, 'RESOURCE_KILLED', text(mem));
  assert.notEqual(mem.monty.isolation.childPid, cpu.monty.isolation.childPid);
  // Limits are the run's own: a generous run after a tight one on the same worker is not held to the old ones.
  const big = await monty('len("a" * (40 * 1024 * 1024))', { limits: { memoryBytes: 256 << 20 } });
  assert.equal(big.status, 'SUCCESS', text(big));
  const small = await monty('len("a" * (40 * 1024 * 1024))', { limits: { memoryBytes: 16 << 20 } });
  assert.equal(small.status, 'RESOURCE_KILLED', text(small));
});

test('a compromised worker is contained by its sandbox: no network, no host files, no other process, runs as nobody', { skip: process.getuid?.() !== 0 ? 'needs root (the sandbox runs as nobody)' : false }, async () => {
  // A host-side secret beside the test files (world-readable on the host: only the sandbox keeps it out).
  writeFileSync(join(base, 'host-secret.txt'), 'host secret', { mode: 0o644 });
  const { createServer } = await import('node:net');
  let connections = 0;
  const server = createServer((s) => {
    connections++;
    s.destroy();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  const port = (server.address() as { port: number }).port;
  const hostile = testWorker(
    'hostile-worker',
    `
import { readFileSync, readdirSync, writeFileSync } from 'node:fs';
import { connect } from 'node:net';
import { spawnSync } from 'node:child_process';
const attempt = (f) => { try { const r = f(); return { ok: true, value: String(r).slice(0, 200) }; } catch (e) { return { ok: false, code: e.code ?? e.message }; } };
ready();
onGo((job) => {
  frame('s');
  const what = job.code;
  let report = {};
  if (what === 'look') report = {
    uid: process.getuid(), uidMap: readFileSync('/proc/self/uid_map', 'utf8').trim(), pids: readdirSync('/proc').filter((n) => /^\\d+$/.test(n)),
    netDevices: readFileSync('/proc/net/dev', 'utf8').split('\\n').slice(2).map((l) => l.split(':')[0].trim()).filter(Boolean),
    env: Object.keys(process.env),
    devices: readFileSync('/proc/self/mountinfo', 'utf8').split('\\n').filter((l) => / \\/dev\\/(null|zero|full|random|urandom|tty) /.test(l)).map((l) => l.split(' ')[4] + ' ' + l.split(' ')[5].split(',')[0]),
  };
  if (what === 'files') for (const [k, f] of Object.entries({
    shadow: () => readFileSync('/etc/shadow', 'utf8'), root: () => readdirSync('/root'), hostSecret: () => readFileSync(${JSON.stringify(join(base, 'host-secret.txt'))}, 'utf8'),
    hostProc: () => readFileSync('/proc/${process.pid}/environ', 'utf8'), passwd: () => readFileSync('/etc/passwd', 'utf8'),
    writeUsr: () => writeFileSync('/usr/airlock-pwned', 'x'), writeEtc: () => writeFileSync('/etc/airlock-pwned', 'x'), writeRoot: () => writeFileSync('/airlock-pwned', 'x'),
    writeTmp: () => writeFileSync('/tmp/airlock-pwned', 'x'), writeOwnCode: () => writeFileSync('/airlock/lanes/airlock-pwned', 'x'), writeStaging: () => writeFileSync('/w/scratch', 'x'),
  })) report[k] = attempt(f);
  if (what === 'socket') { const s = connect(${port}, '127.0.0.1'); s.on('connect', () => frame('o', 'connected')); s.on('error', (e) => frame('o', 'error ' + e.code)); return; }
  if (what === 'spawn') report = attempt(() => JSON.stringify(spawnSync('/bin/sh', ['-c', 'id'], { encoding: 'utf8' })));
  frame('o', JSON.stringify(report));
  frame('x', JSON.stringify({ t: 'end', ok: true, resultJson: null, resultTruncated: false, outSkipped: 0 }));
});
`,
  );
  const run = (what: string) => monty(what, { opts: { workerPath: hostile }, limits: { wallMs: 10_000 } });
  try {
    await hostileRuns(run, () => connections);
  } finally {
    await new Promise<void>((r) => server.close(() => r()));
  }
});

async function hostileRuns(run: (what: string) => Promise<MontyRunObservation>, connections: () => number): Promise<void> {
  const look = await run('look');
  assert.equal(look.status, 'SUCCESS', text(look));
  const seen = JSON.parse(look.stdout.bytes.toString()) as { uid: number; uidMap: string; pids: string[]; netDevices: string[]; env: string[]; devices: string[] };
  // The host's device nodes bound in are read-only binds (their times are the host's), /dev/null over /dev/tty.
  assert.ok(seen.devices.length >= 6 && seen.devices.every((d) => d.endsWith(' ro')), `device binds: ${seen.devices.join(', ')}`);
  assert.equal(seen.uid, 65534);
  assert.match(seen.uidMap, /^65534\s+\d+\s+1$/, 'one uid is mapped, nothing else');
  const own = process.getuid?.() === 0 ? look.host.hostUid : process.getuid?.();
  if (process.getuid?.() === 0) assert.ok(look.host.hostIds === 'own' && own !== dedicatedSandboxUser().uid, `a uid of the worker's own: ${own}`);
  assert.equal(readFileSync(`/proc/${look.monty.isolation.childPid}/status`, 'utf8').match(/^Uid:\s+(\d+)\s+(\d+)\s+(\d+)/m)?.slice(1).join(' '), `${own} ${own} ${own}`, 'on the host the worker is its uid (real, effective, saved)');
  assert.ok(seen.pids.length <= 3, `its own pid namespace: ${seen.pids}`);
  assert.deepEqual(seen.netDevices, ['lo'], 'an empty network namespace');
  assert.deepEqual(seen.env.filter((k) => k !== 'PWD'), [], 'no environment (bwrap sets PWD only)');

  const files = await run('files');
  assert.equal(files.status, 'SUCCESS', text(files));
  const f = JSON.parse(files.stdout.bytes.toString()) as Record<string, { ok: boolean; code?: string; value?: string }>;
  for (const k of ['shadow', 'root', 'hostSecret', 'hostProc', 'writeUsr', 'writeEtc', 'writeRoot', 'writeTmp', 'writeOwnCode']) assert.equal(f[k]?.ok, false, `${k}: ${JSON.stringify(f[k])}`);
  assert.deepEqual((f.passwd?.value ?? '').split('\n').filter(Boolean).map((l) => l.split(':')[0]), ['root', 'sandbox'], 'the sandbox /etc/passwd is generated: root and sandbox only');
  assert.equal(f.writeStaging?.ok, true, 'its own staging tmpfs is the one writable place');
  for (const p of ['/usr/airlock-pwned', '/etc/airlock-pwned', '/airlock-pwned', '/tmp/airlock-pwned']) assert.equal(existsSync(p), false, p);

  const sock = await run('socket');
  assert.equal(sock.status, 'POLICY_ABORTED', text(sock));
  assert.match(sock.reason, /seccomp allowlist forbids.*SIGSYS/);
  assert.equal(sock.exit.signal, 'SIGSYS');
  assert.equal(connections(), 0, 'nothing reached the host listener');

  const spawned = await run('spawn');
  // fork (clone without CLONE_THREAD) is trapped: the worker dies before any process starts.
  assert.equal(spawned.status, 'POLICY_ABORTED', text(spawned));
  assert.equal(spawned.exit.signal, 'SIGSYS');
  assert.doesNotMatch(spawned.stdout.bytes.toString(), /uid=/);
}

test('a crafted job cannot make the real worker write outside its run folder', async () => {
  const pool = montyPool(montyWorkerPath()!);
  const got = await pool.acquire();
  assert.ok(got.ok);
  const w = got.worker;
  const { encodeFrame } = await import('../../src/sandbox/lanes/monty-protocol.js');
  w.attach(() => undefined, () => undefined);
  w.proc.stdin.write(encodeFrame('J', JSON.stringify({ code: '1', scriptName: 'x.py', inputs: [{ name: '../../../w/evil', bytes: 1 }], outWriteBytes: 1, wallMs: 1000, limits: { maxMemory: 1 << 20, maxRecursionDepth: 10, maxAllocations: null }, resultBytes: 10 })));
  w.proc.stdin.write(encodeFrame('I', '../../../w/evil'));
  const e = await w.exited;
  assert.equal(e.code, 70, 'the worker refuses the frame and exits');
  assert.match(w.stderr(), /protocol error: unexpected input/);
  pool.release(w, true);
});

test('a warm pool: workers started ahead, a trivial run takes milliseconds; idle workers do not keep the process alive', async () => {
  const { configureMontyPools } = await import('../../src/sandbox/lanes/monty-pool.js');
  configureMontyPools({ min: 2 });
  const pool = montyPool(montyWorkerPath()!);
  pool.warm();
  for (let i = 0; i < 300 && pool.stats().filter((s) => s.state === 'idle').length < 2; i++) await new Promise((r) => setTimeout(r, 20));
  assert.ok(pool.stats().filter((s) => s.state === 'idle').length >= 2, JSON.stringify(pool.stats()));
  const t0 = performance.now();
  const o = await monty('1 + 1');
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.ok(performance.now() - t0 < 200, `a warm run took ${performance.now() - t0} ms`);
  configureMontyPools({ min: 0 });

  // A process that ran the lane and never closed its pool still exits; its worker and the worker's
  // cgroups go with it. One killed with SIGKILL loses its worker too (stdin's end), and the next
  // sweep removes the cgroups it left.
  const lane = new URL('../../src/sandbox/lanes/monty.js', import.meta.url).href;
  const oneRun = (name: string, hang: boolean): string => {
    const script = join(base, `${name}.mjs`);
    writeFileSync(script, `import { readFileSync } from 'node:fs';
import { runInMontyLane } from ${JSON.stringify(lane)};
const r = await runInMontyLane(${JSON.stringify(action('1'))}, { inputsDir: ${JSON.stringify(inputsDir)}, outDir: ${JSON.stringify(join(base, `${name}-out`))} });
const pid = r.observation.monty.isolation.childPid;
const groups = readFileSync('/proc/' + pid + '/cgroup', 'utf8').split('\\n').map((l) => l.split(':')[2]).filter((g) => g && g.includes('monty-w-'));
console.log(JSON.stringify({ status: r.observation.status, pid, groups }));
${hang ? 'setInterval(() => {}, 1000);' : ''}
`);
    return script;
  };
  const groupsLeft = (groups: string[]): string[] => groups.flatMap((g) => ['/sys/fs/cgroup/memory', '/sys/fs/cgroup/pids', '/sys/fs/cgroup/cpuacct', '/sys/fs/cgroup/unified', '/sys/fs/cgroup'].map((m) => join(m, g))).filter((d) => d.includes('monty-w-') && existsSync(d));
  const { spawn, spawnSync } = await import('node:child_process');
  const r = spawnSync(process.execPath, [oneRun('one-run', false)], { encoding: 'utf8', timeout: 30_000 });
  assert.equal(r.status, 0, r.stderr);
  const res = JSON.parse(r.stdout.trim()) as { status: string; pid: number; groups: string[] };
  assert.equal(res.status, 'SUCCESS');
  const root = process.getuid?.() === 0;
  if (root) assert.ok(res.groups.length > 0, 'the worker had cgroups of its own');
  assert.ok(await gone(res.pid), 'the worker ended with its process');
  assert.deepEqual(groupsLeft(res.groups), [], 'its cgroups were removed at exit');

  const killed = spawn(process.execPath, [oneRun('killed-run', true)], { stdio: ['ignore', 'pipe', 'inherit'] });
  const line = await new Promise<string>((resolve) => killed.stdout.once('data', (d: Buffer) => resolve(d.toString())));
  const k = JSON.parse(line.trim()) as { status: string; pid: number; groups: string[] };
  assert.equal(k.status, 'SUCCESS');
  if (root) assert.ok(k.groups.length > 0);
  killed.kill('SIGKILL');
  await new Promise((r) => killed.once('exit', r));
  assert.ok(await gone(k.pid), 'the worker of a killed service ends (its stdin closed)');
  if (root) assert.ok(groupsLeft(k.groups).length > 0, 'a killed service leaves its worker cgroups (nothing ran its exit hook)');
  const { sweepOrphans } = await import('../../src/sandbox/ns/sweep.js');
  sweepOrphans();
  assert.deepEqual(groupsLeft(k.groups), [], 'the sweep removed the cgroups the killed service left');
});

test('a run waiting for a worker started ahead of need keeps the process up until it ends (a worker retired after each run)', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-monty-wait-'));
  const lane = new URL('../../src/sandbox/lanes/monty.js', import.meta.url).href;
  const pool = new URL('../../src/sandbox/lanes/monty-pool.js', import.meta.url).href;
  const script = join(dir, 'three-runs.mjs');
  // One worker at most, retired after each run: the next run waits for the replacement the pool
  // started ahead of need, and nothing else keeps this process alive meanwhile.
  writeFileSync(script, `import { runInMontyLane } from ${JSON.stringify(lane)};
import { configureMontyPools } from ${JSON.stringify(pool)};
configureMontyPools({ min: 1, max: 1, maxRunsPerWorker: 1 });
const statuses = [];
for (let i = 0; i < 3; i++) {
  const r = await runInMontyLane(${JSON.stringify(action('1'))}, { inputsDir: ${JSON.stringify(inputsDir)}, outDir: ${JSON.stringify(dir)} + '/out' + i });
  statuses.push(r.observation.status);
}
console.log(JSON.stringify(statuses));
`);
  const { spawnSync } = await import('node:child_process');
  const r = spawnSync(process.execPath, [script], { encoding: 'utf8', timeout: 60_000 });
  assert.equal(r.status, 0, `exit ${r.status} (13: a run was left waiting when the process ended) ${r.stderr}`);
  assert.deepEqual(JSON.parse(r.stdout.trim()), ['SUCCESS', 'SUCCESS', 'SUCCESS']);
});

test('close() ends every worker, removes their cgroups and closes the files the host held open on them', async () => {
  const o = await monty('1');
  const pid = o.monty.isolation.childPid!;
  const groups = o.monty.isolation.sandbox?.cgroup ? readFileSync(`/proc/${pid}/cgroup`, 'utf8').split('\n').map((l) => l.split(':')[2]).filter((g): g is string => Boolean(g && g.includes('monty-w-'))) : [];
  // The worker's /proc files and its cgroup's counters are read through descriptors held across runs.
  const held = (): string[] => readdirSync('/proc/self/fd').flatMap((fd) => {
    try {
      const t = readlinkSync(`/proc/self/fd/${fd}`);
      return t.startsWith(`/proc/${pid}/`) || groups.some((g) => t.includes(g)) ? [t] : [];
    } catch {
      return [];
    }
  });
  assert.ok(held().includes(`/proc/${pid}/status`), held().join(', '));
  if (groups.length > 0) assert.ok(held().some((t) => t.includes('/sys/fs/cgroup/')), held().join(', '));
  await closeMontyPools();
  assert.ok(await gone(pid));
  assert.deepEqual(held(), [], 'nothing of the worker is left open');
  for (const g of groups) for (const m of ['/sys/fs/cgroup/memory', '/sys/fs/cgroup/pids', '/sys/fs/cgroup/unified', '/sys/fs/cgroup']) assert.equal(existsSync(join(m, g)), false, `${m}${g} removed`);
  const again = await monty('2');
  assert.equal(again.status, 'SUCCESS', 'a closed pool is made again on the next run');
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

test('p50 of a trivial program through runInMontyLane on a warm worker (50 runs)', async (t) => {
  await monty('0');
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
