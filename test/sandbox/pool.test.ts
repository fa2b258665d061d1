// Sandboxes started ahead of need (ns/pool.ts), with real bwrap, the real host tracer and real
// programs: a pooled run is the program's own (argv, env, cwd, observation), serves one run only,
// keeps every limit, and leaves nothing behind; a hostile program finds nothing of the launcher.
import { after, before, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, existsSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, renameSync, rmSync, statSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { nativeBinaryPath } from '../../src/base/native.js';
import { closeSandboxPool, configureSandboxPool, sandboxPoolState } from '../../src/sandbox/ns/pool.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { stagingBase } from '../../src/sandbox/ns/staging.js';
import { mountsBelow } from '../../src/sandbox/ns/sweep.js';
import { syscallTracer } from '../../src/sandbox/observe/tracer.js';
import type { Limits, NsScope, Observation } from '../../src/sandbox/types.js';
import { freshOut, LIMITS, run, text, until as waitUntil } from './helpers-ns.js';
import { airlock } from '../helpers/cli.js';

const skip = syscallTracer() === null ? 'needs root and the host tracer (dist/native/airlock-tracer)' : nativeBinaryPath('airlock-exec') === null ? 'airlock-exec is not built' : false;

before(() => configureSandboxPool(1));
after(async () => {
  await closeSandboxPool();
  await sandboxIdle();
});

const until = (what: string, ok: () => boolean, ms?: number): Promise<void> => waitUntil(what, ok, sandboxPoolState, ms);

/** A run of this shape (limits, scopes) has happened (it asks for the pool) and a sandbox of that shape waits. */
async function warm(limits: Partial<Limits> = {}, scopes: NsScope[] = []): Promise<void> {
  await sandboxIdle(); // a run's cleanup asks for its shape's pool: none may come after this
  await closeSandboxPool(); // only this shape's sandbox waits afterwards
  configureSandboxPool(1);
  await run(['/bin/true'], { limits, scopes });
  await sandboxIdle();
  await until('a sandbox waiting', () => sandboxPoolState().waiting === 1);
}

const pooled = (o: Observation): void => assert.equal(o.host.sandboxStart, 'ahead of need', `the run did not take a pooled sandbox: ${text(o)}`);

/** Host pids of this process's descendants whose command line starts with `prefix`. */
function descendants(prefix: string): number[] {
  const parent = new Map<number, number>();
  for (const d of readdirSync('/proc').filter((n) => /^\d+$/.test(n))) {
    try {
      parent.set(Number(d), Number(readFileSync(`/proc/${d}/stat`, 'utf8').replace(/^.*\) /s, '').split(' ')[1]));
    } catch {
      /* gone */
    }
  }
  const mine = (pid: number): boolean => {
    for (let p = parent.get(pid), hops = 0; p !== undefined && hops < 64; p = parent.get(p), hops++) if (p === process.pid) return true;
    return false;
  };
  return [...parent.keys()].filter((pid) => {
    try {
      return mine(pid) && readFileSync(`/proc/${pid}/cmdline`, 'utf8').startsWith(prefix);
    } catch {
      return false;
    }
  });
}

test('a run takes a sandbox started ahead of need: argv, env and cwd are its own, and only its program is observed', { skip }, async () => {
  await warm();
  const o = await run(['/bin/sh', '-c', 'echo "$GREETING|$PWD|$0|$1"; ls -A /.airlock', 'sh-name', 'arg one'], { env: { GREETING: 'hello' }, cwd: '/in' });
  pooled(o);
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString(), 'hello|/in|sh-name|arg one\nexec\n', text(o));
  const exe = o.sideEffects?.processesSpawned.executables.map((e) => e.path) ?? [];
  assert.ok(exe.includes('/bin/sh') && exe.includes('/usr/bin/ls'), `the program's execs: ${JSON.stringify(exe)}`);
  assert.ok(!exe.some((p) => p.includes('.airlock')), `the launcher's own exec is not the program's: ${JSON.stringify(exe)}`);
  assert.ok(o.sideEffects?.programPid, 'the program process is known');
  assert.deepEqual(o.sideEffects?.networkAttempts, [], 'the launcher\'s connection is not the program\'s');
});

test('a program the pooled sandbox lacks ends with 127 (FAILURE, in airlock-exec\'s words), as one started on request does', { skip }, async () => {
  await warm();
  const o = await run(['/no/such/program']);
  pooled(o);
  assert.equal(o.status, 'FAILURE', text(o));
  assert.equal(o.exit.code, 127, text(o));
  assert.match(o.reason, /\/no\/such\/program could not be executed in the sandbox \(No such file or directory\)/);
});

test('each pooled sandbox serves one run: nothing of a run is left for the next (/tmp, /dev/shm, /out, processes)', { skip }, async () => {
  await warm();
  const first = await run(['/bin/sh', '-c', 'echo secret > /tmp/left; echo secret > /dev/shm/left; echo x > /out/left; (sleep 30 &) ; echo $$']);
  pooled(first);
  assert.equal(first.status, 'SUCCESS', text(first));
  await sandboxIdle();
  await until('the next sandbox waiting', () => sandboxPoolState().waiting === 1);
  const second = await run(['/bin/sh', '-c', 'ls -A /tmp /dev/shm /out; ps -e -o comm= 2>/dev/null || ls /proc | grep -c "^[0-9]"']);
  pooled(second);
  assert.notEqual(second.runId, first.runId);
  const out = second.stdout.bytes.toString();
  assert.ok(!out.includes('left'), `a file of the previous run is visible: ${out}`);
  assert.ok(!/\bsleep\b/.test(out), `a process of the previous run is alive: ${out}`);
  assert.equal(second.fs.out?.length, 0, 'the new /out is empty');
});

test('limits hold in a pooled sandbox: memory, processes, wall time and CPU', { skip }, async () => {
  const memory = { memoryBytes: 64 << 20 };
  await warm(memory);
  const oom = await run(['python3', '-c', 'x = bytearray(400 << 20); print(len(x))'], { limits: memory });
  pooled(oom);
  assert.equal(oom.status, 'RESOURCE_KILLED', text(oom));
  assert.ok(oom.limitsExceeded.includes('memoryBytes'), text(oom));

  const pids = { pids: 8 };
  await warm(pids);
  const bomb = await run(['/bin/sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 5 & done; wait'], { limits: pids });
  pooled(bomb);
  assert.ok(bomb.limitsExceeded.includes('pids'), text(bomb));

  // The wall time is the host's, per run: a sandbox started for runs of 5 s serves one of 500 ms.
  await warm();
  const t0 = Date.now();
  const slow = await run(['/bin/sleep', '20'], { limits: { wallMs: 500 } });
  pooled(slow);
  assert.equal(slow.status, 'TIMEOUT', text(slow));
  assert.ok(Date.now() - t0 < 3000, 'killed at its own wall time, counted from the request');

  const cpu = { cpuMs: 200 };
  await warm(cpu);
  const spin = await run(['python3', '-c', 'while True: pass'], { limits: cpu });
  pooled(spin);
  assert.equal(spin.status, 'RESOURCE_KILLED', text(spin));
  assert.ok(spin.limitsExceeded.includes('cpuMs'), text(spin));
});

test('a hostile program finds nothing of the launcher to use: its socket is gone, /.airlock is read-only, no descriptor is inherited; the writes are reported', { skip }, async () => {
  await warm();
  const code = [
    'import os, socket',
    's = socket.socket(socket.AF_UNIX)',
    'try:\n s.connect("/.airlock/cmd.sock"); print("CONNECTED")\nexcept OSError as e: print("connect", e.errno)',
    's.close()',
    'try:\n open("/.airlock/exec", "wb"); print("WROTE")\nexcept OSError as e: print("write", e.errno)',
    'try:\n open("/.airlock/planted", "w"); print("PLANTED")\nexcept OSError as e: print("plant", e.errno)',
    'print("fds", sorted(int(f) for f in os.listdir("/proc/self/fd")))',
  ].join('\n');
  const o = await run(['python3', '-c', code]);
  pooled(o);
  const out = o.stdout.bytes.toString();
  assert.ok(!/CONNECTED|WROTE|PLANTED/.test(out), out);
  assert.match(out, /connect 2\b/, 'the launcher\'s socket no longer exists');
  assert.match(out, /fds \[0, 1, 2, 3\]\n/, `only stdio (and the listing's own descriptor): ${out}`);
  const writes = (o.sideEffects?.fileAccess ?? []).filter((a) => a.access === 'write').map((a) => a.path);
  assert.ok(writes.includes('/.airlock/exec') && writes.includes('/.airlock/planted'), `the write attempts are reported: ${JSON.stringify(writes)}`);
});

test('a waiting sandbox has no command socket left: the host user of the sandbox cannot reach its launcher', { skip }, async () => {
  await warm();
  const base = await stagingBase();
  const [waiting] = readdirSync(base).filter((n) => n.startsWith('ns-'));
  assert.ok(waiting, 'a sandbox waits');
  const ctl = join(base, waiting, 'ctl');
  assert.deepEqual(readdirSync(ctl), ['exec'], 'only the launcher\'s mount point is left in its control folder');
  // As the sandbox's host user (its own: the owner of its /out), the socket's path leads nowhere.
  const own = statSync(join(base, waiting, 'rw', 'out'));
  const r = spawnSync('setpriv', ['--reuid', String(own.uid), '--regid', String(own.gid), '--clear-groups', '/usr/bin/python3', '-c', `import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n s.connect(${JSON.stringify(join(ctl, 'cmd.sock'))}); print('CONNECTED')\nexcept OSError as e: print('refused', e.errno)`], { encoding: 'utf8' });
  assert.match(r.stdout, /^refused 2\b/, r.stdout + r.stderr);
  const o = await run(['/bin/echo', 'mine']);
  pooled(o);
  assert.equal(o.stdout.bytes.toString(), 'mine\n');
});

test('a pooled sandbox killed while it waits is dropped with a warning, and the next run starts its own', { skip }, async () => {
  await warm();
  const warnings: string[] = [];
  const onWarning = (w: Error): void => void warnings.push(w.message);
  process.on('warning', onWarning);
  try {
    const shims = descendants('/.airlock/exec');
    assert.equal(shims.length, 1, 'one launcher waits');
    process.kill(shims[0]!, 'SIGKILL');
    await until('the dead sandbox dropped', () => sandboxPoolState().waiting === 0);
    await until('the warning', () => warnings.some((w) => /ended before it was used/.test(w)));
    const o = await run(['/bin/echo', 'still here']);
    assert.equal(o.status, 'SUCCESS', text(o));
    assert.equal(o.host.sandboxStart, 'on request');
    assert.equal(o.stdout.bytes.toString(), 'still here\n');
  } finally {
    process.off('warning', onWarning);
  }
});

test('closing the pool removes its sandboxes: no process, mount, cgroup or folder is left', { skip }, async () => {
  await warm();
  const base = await stagingBase();
  const waiting = readdirSync(base).filter((n) => n.startsWith('ns-'));
  assert.equal(waiting.length, 1, `one sandbox's folder: ${waiting.join(', ')}`);
  await closeSandboxPool();
  await until('the launcher gone', () => descendants('/.airlock/exec').length === 0);
  assert.deepEqual(readdirSync(base).filter((n) => n.startsWith('ns-')), []);
  assert.deepEqual(mountsBelow(base).filter((m) => m !== base), []);
  for (const root of ['/sys/fs/cgroup/memory/airlock', '/sys/fs/cgroup/pids/airlock', '/sys/fs/cgroup/airlock']) {
    if (existsSync(root)) assert.ok(!existsSync(join(root, waiting[0]!)), `cgroup ${join(root, waiting[0]!)} is left`);
  }
});

test('a process with sandboxes waiting exits by itself, and its exit removes them', { skip }, () => {
  const script = `
    const { configureSandboxPool, sandboxPoolState } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/pool.js', import.meta.url).href)});
    const { runNs, sandboxIdle } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/runner.js', import.meta.url).href)});
    const { stagingBase } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/staging.js', import.meta.url).href)});
    configureSandboxPool(2);
    const o = await runNs({ argv: ['/bin/true'], outDir: process.env.OUT, limits: ${JSON.stringify(LIMITS)} });
    await sandboxIdle();
    while (sandboxPoolState().waiting < 2) await new Promise((r) => setTimeout(r, 20));
    console.log(JSON.stringify({ status: o.status, base: await stagingBase() }));`;
  const t0 = Date.now();
  const r = spawnSync(process.execPath, ['--input-type=module', '-e', script], { encoding: 'utf8', timeout: 30_000, env: { ...process.env, OUT: freshOut() } });
  assert.equal(r.status, 0, `${r.stderr}`);
  assert.ok(Date.now() - t0 < 20_000, 'it did not wait for its waiting sandboxes');
  const { status, base } = JSON.parse(r.stdout.trim().split('\n').pop()!) as { status: string; base: string };
  assert.equal(status, 'SUCCESS');
  assert.equal(existsSync(base), false, `its staging (with the waiting sandboxes) is gone: ${base}`);
  assert.deepEqual(mountsBelow(base), []);
});

test('airlock doctor says whether sandboxes can be started ahead of need here', { skip }, () => {
  const r = airlock(['doctor'], { env: { AIRLOCK_SANDBOX_POOL: '3' } });
  assert.match(r.stdout, /\nwarm sandboxes +yes: services keep 3 per shape of limits for runs without a scope or the network/, r.stdout);
  const off = airlock(['doctor'], { env: { AIRLOCK_SYSCALL_TRACER: 'strace' } });
  assert.match(off.stdout, /\nwarm sandboxes +NO: they need root and the host syscall tracer/, off.stdout);
});

/** A scope folder the sandbox's user may write in (the sandbox gets exactly `nobody`'s permissions). */
function scopeDir(content: string): string {
  const d = mkdtempSync(join('/var/tmp', 'airlock-pool-scope-'));
  chmodSync(d, 0o777);
  writeFileSync(join(d, 'keep.txt'), content, { mode: 0o666 });
  chmodSync(join(d, 'keep.txt'), 0o666);
  return d;
}

test('a directory scope in a pooled sandbox is opened when the request comes: a folder swapped in after the sandbox started is the one seen; changes are captured, the real files never change', { skip }, async () => {
  const scope = scopeDir('v1');
  try {
    await warm({}, [{ hostPath: scope }]);
    // After the sandbox started: the scope's folder is replaced by another one.
    renameSync(scope, `${scope}.old`);
    mkdirSync(scope);
    chmodSync(scope, 0o777);
    writeFileSync(join(scope, 'keep.txt'), 'v2', { mode: 0o666 });
    const o = await run(['/bin/sh', '-c', `cat ${scope}/keep.txt; echo new > ${scope}/new.txt`], { scopes: [{ hostPath: scope }] });
    pooled(o);
    assert.equal(o.status, 'SUCCESS', text(o));
    assert.equal(o.stdout.bytes.toString(), 'v2', 'the sandbox sees the scope as it is at the request');
    assert.equal(o.host.hostIds, 'own', 'a pooled writer has a uid of its own (its scope over an idmapped clone)');
    assert.equal(o.fs.scopes[0]?.root.ident.split(':')[1], String(statSync(scope).ino), 'the root recorded is the new folder');
    assert.deepEqual((o.fs.scopes[0]?.changes ?? []).map((c) => [c.path, c.change]), [[join(scope, 'new.txt'), 'added']]);
    assert.equal(existsSync(join(scope, 'new.txt')), false, 'the real folder did not change');
  } finally {
    rmSync(scope, { recursive: true, force: true });
    rmSync(`${scope}.old`, { recursive: true, force: true });
  }
});

test('a writer\'s scope found to be on a filesystem without idmapped mounts: its run falls back, and no sandbox keeps waiting for its shape', { skip }, async (t) => {
  const scope = scopeDir('v1');
  t.after(() => {
    spawnSync('umount', [scope]);
    rmSync(scope, { recursive: true, force: true });
  });
  await warm({}, [{ hostPath: scope }]);
  // After the sandbox started: the scope's path becomes a filesystem that cannot be idmapped (ramfs, as NFS or FUSE).
  assert.equal(spawnSync('mount', ['-t', 'ramfs', '-o', 'mode=0777', 'none', scope]).status, 0);
  writeFileSync(join(scope, 'keep.txt'), 'v2', { mode: 0o666 });
  const o = await run(['/bin/sh', '-c', `cat ${scope}/keep.txt; echo new > ${scope}/new.txt`], { scopes: [{ hostPath: scope }] });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.host.hostIds, 'own-gid', 'run again with the sandbox user\'s uid');
  await sandboxIdle();
  await new Promise((r) => setTimeout(r, 300)); // a sandbox the failed attempt's cleanup started would be waiting by now
  assert.deepEqual({ waiting: sandboxPoolState().waiting, starting: sandboxPoolState().starting }, { waiting: 0, starting: 0 }, 'a sandbox waits for a shape no run will take');
});

test('a read-only scope in a pooled sandbox cannot be written (the overlay that reaches the waiting sandbox is read-only itself)', { skip }, async () => {
  const scope = scopeDir('v1');
  try {
    await warm({}, [{ hostPath: scope, readOnly: true }]);
    const o = await run(['/bin/sh', '-c', `cat ${scope}/keep.txt; echo x > ${scope}/keep.txt; echo y > ${scope}/new.txt; echo done`], { scopes: [{ hostPath: scope, readOnly: true }] });
    pooled(o);
    assert.match(o.stdout.bytes.toString(), /^v1done\n$/, text(o));
    assert.match(o.stderr.bytes.toString(), /Read-only file system[\s\S]*Read-only file system/, text(o));
    assert.deepEqual(o.fs.scopes[0]?.changes ?? [], []);
    assert.equal(readFileSync(join(scope, 'keep.txt'), 'utf8'), 'v1');
  } finally {
    rmSync(scope, { recursive: true, force: true });
  }
});

test('a scope that is no longer a folder when the request comes: the run starts its own sandbox', { skip }, async () => {
  const scope = scopeDir('v1');
  try {
    await warm({}, [{ hostPath: scope }]);
    rmSync(scope, { recursive: true });
    writeFileSync(scope, 'a file now', { mode: 0o666 });
    chmodSync(scope, 0o666);
    const o = await run(['/bin/cat', scope], { scopes: [{ hostPath: scope }] });
    assert.equal(o.host.sandboxStart, 'on request', text(o));
    assert.equal(o.stdout.bytes.toString(), 'a file now', text(o));
    assert.equal(sandboxPoolState().waiting, 1, 'the waiting sandbox was left for a run of its shape');
  } finally {
    rmSync(scope, { recursive: true, force: true });
  }
});

test('a pool limited to some shapes keeps none of the others: a run with a scope starts its own sandbox every time', { skip }, async () => {
  const scope = scopeDir('v1');
  try {
    await warm(); // a sandbox of the no-scope shape waits
    configureSandboxPool(1, (shape) => shape.scopes.length === 0);
    assert.equal(sandboxPoolState().waiting, 1, 'the accepted shape keeps its waiting sandbox');
    for (let i = 0; i < 2; i++) {
      const o = await run(['/bin/true'], { scopes: [{ hostPath: scope }] });
      assert.equal(o.host.sandboxStart, 'on request', text(o));
      await sandboxIdle();
    }
    assert.equal(sandboxPoolState().waiting, 1, 'no sandbox was started for the scoped shape');
    pooled(await run(['/bin/true']));
    // Leaving a shape out drops its waiting sandboxes at once.
    await sandboxIdle();
    await until('the no-scope shape waiting again', () => sandboxPoolState().waiting === 1);
    configureSandboxPool(1, () => false);
    assert.equal(sandboxPoolState().waiting, 0);
  } finally {
    configureSandboxPool(1);
    rmSync(scope, { recursive: true, force: true });
  }
});
