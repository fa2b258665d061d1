// Hostile programs against the host's observation of an ns run (a security review, 2026-11-27): what a
// program leaves behind must be reported or judged, never turn the run into a set-up failure or
// run the host past its deadline.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { chmodSync, existsSync, mkdtempSync, rmSync, truncateSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Action } from '../../src/action/action.js';
import { ScopeFs, scopeFsBinaryPath } from '../../src/base/scope-fs.js';
import { judge } from '../../src/judge/judge.js';
import { doctor } from '../../src/sandbox/doctor.js';
import { DiffBudget, DiffBudgetExceeded } from '../../src/sandbox/observe/fs-diff.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { lowerTreeOf } from '../../src/sandbox/ns/scopes.js';
import { freshOut, py, text } from './helpers-ns.js';

const DEEP = (where: string, depth: number): string => [
  'import os, socket',
  `os.chdir(${JSON.stringify(where)})`,
  `for i in range(${depth}):`,
  '  os.mkdir("d"); os.chdir("d")',
  'open("x", "w").write("hidden")',
  // Something the observation would otherwise report: a network attempt.
  's = socket.socket()',
  'try: s.connect(("1.1.1.1", 443))',
  'except OSError: pass',
  'open("/out/result.txt", "w").write("the program ran")',
  'print("done", flush=True)',
].join('\n');

test('a deep directory chain left in /dev/shm or /tmp: what the program did is still reported (output, /out, network), the scratch it left is a finding (JG_SCRATCH_UNOBSERVED), never a set-up failure', async () => {
  for (const where of ['/dev/shm', '/tmp']) {
    const outDir = freshOut();
    const o = await py(DEEP(where, 2100), { outDir });
    const copied = existsSync(join(outDir, 'result.txt'));
    assert.equal(o.status, 'SUCCESS', `${where}: the program ran (its /out was copied to ${outDir}: ${copied}), yet: status=${o.status} reason=${o.reason.slice(0, 160)}... sideEffectsUnavailable=${o.sideEffectsUnavailable} fs.out=${JSON.stringify(o.fs.out)} stdout=${JSON.stringify(o.stdout.bytes.toString())}`);
    // What the program did is reported: its output, its /out, its network attempt.
    assert.equal(o.stdout.bytes.toString(), 'done\n', text(o));
    assert.deepEqual((o.fs.out ?? []).map((c) => c.path), ['/out/result.txt'], JSON.stringify(o.fs));
    assert.ok(copied);
    if (o.sideEffects) assert.ok(o.sideEffects.networkAttempts.some((n) => n.address === '1.1.1.1' && n.port === 443), JSON.stringify(o.sideEffects.networkAttempts));
    else assert.doesNotMatch(o.sideEffectsUnavailable ?? '', /did not run/);
    const j = judge(deepAction(), o);
    assert.equal(j.verdict, 'BLOCK', j.reasons.join('\n'));
    if (where === '/dev/shm' && o.scratch) {
      // What the host could not look at is said, and judged: never a silent pass.
      assert.match(o.scratch.incomplete ?? '', /could not be read \(ENAMETOOLONG at \/dev\/shm\/d\/d/, JSON.stringify(o.scratch).slice(0, 600));
      assert.ok(j.reasons.some((r) => r.startsWith('JG_SCRATCH_UNOBSERVED: ')), j.reasons.join('\n'));
      assert.equal(j.compliance.sandbox_requirements_met, false);
    }
  }
});

/** Declares the run's /out file: what is left to BLOCK it is the network attempt and the unobserved scratch. */
function deepAction(): Action {
  return {
    id: 'attack-ns',
    source: 'tool-request',
    kind: 'TEST',
    preconditions: { pathsExist: [], networkAvailable: false, userIdle: false },
    cooldownOnRepeat: false,
    lane: 'ns',
    run: { kind: 'argv', argv: ['x'] },
    inputs: [],
    outputsExpected: [],
    scope: { paths: [], recursive: false },
    effects: { create: ['/out/**'], modify: [], delete: [], network: false, systemStateChange: false },
    limits: { wallMs: 5000, cpuMs: 3000, memoryBytes: 1 << 28, diskBytes: 1 << 20, files: 10_000, pids: 64, stdoutBytes: 1024, stderrBytes: 1024 },
    network: { mode: 'none', allowlist: [] },
    risk: 'LOW',
    confirmationRequired: false,
    rollbackSupported: true,
    sandboxRequired: true,
    display: 'x',
  };
}

test('a deep directory chain left in /out: the /out diff fails (ENAMETOOLONG), reported as outError, nothing copied', async () => {
  const o = await py(DEEP('/out', 2100));
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.match(o.fs.outError ?? '', /ENAMETOOLONG|diff/, JSON.stringify(o.fs));
  assert.equal(o.fs.out, null);
});

/** A scope folder (root's, open to all) holding one sparse file of `gb` GiB: no disk used. */
function sparseScope(gb: number): string {
  const scope = mkdtempSync(join('/var/tmp', 'airlock-ns-sparse-'));
  chmodSync(scope, 0o777);
  writeFileSync(join(scope, 'disk.img'), '');
  truncateSync(join(scope, 'disk.img'), gb * 2 ** 30);
  return scope;
}

test('hashing a big (sparse) pre-image of a scope stops at the observation deadline (ScopeFs.hash), the agent ended', { timeout: 600_000 }, async (t) => {
  if (!scopeFsBinaryPath()) return t.skip('needs the scope agent (npm run build)');
  // Hashing takes ~5 s a GiB here: the old code read it all (and returned a hash); the deadline is 300 ms.
  const gb = Number(process.env.ATTACK_SPARSE_GB ?? 2);
  const scope = sparseScope(gb);
  const fs = await ScopeFs.open(scope, 'dir');
  try {
    const t0 = Date.now();
    const budget = new DiffBudget({ files: 1000, bytes: 1 << 20, deadline: t0 + 300 });
    // What observeScope does for a deleted file: its pre-image through the scope's agent.
    await assert.rejects(lowerTreeOf(fs, budget).entry('disk.img'), (e: unknown) => e instanceof DiffBudgetExceeded && e.limit === 'time');
    const took = Date.now() - t0;
    assert.ok(took < 300 + 1500, `hashing a ${gb} GiB pre-image took ${took} ms with a deadline of 300 ms`);
    // The rest of the file could not be skipped: the agent was ended, and says so to a later request.
    assert.equal(fs.running, false);
    await assert.rejects(fs.stat('disk.img'), /scope agent stopped/);
  } finally {
    fs.close();
    rmSync(scope, { recursive: true, force: true });
  }
});

test('a pre-image kept for rollback (ScopeFs.stream) stops at the deadline too, the agent ended', async (t) => {
  if (!scopeFsBinaryPath()) return t.skip('needs the scope agent (npm run build)');
  const scope = sparseScope(Number(process.env.ATTACK_SPARSE_GB ?? 2));
  const fs = await ScopeFs.open(scope, 'dir');
  try {
    const budget = new DiffBudget({ files: 1000, bytes: 1 << 20, deadline: Date.now() + 200 });
    let bytes = 0;
    const t0 = Date.now();
    await assert.rejects(fs.stream('disk.img', (b) => (bytes += b.length), () => budget.tick()), (e: unknown) => e instanceof DiffBudgetExceeded);
    assert.ok(Date.now() - t0 < 200 + 1500 && bytes > 0, `${Date.now() - t0} ms, ${bytes} bytes`);
    assert.equal(fs.running, false);
  } finally {
    fs.close();
    rmSync(scope, { recursive: true, force: true });
  }
});

test('a run that deletes a big (sparse) file of a scope: the observation ends at its deadline, reports the overrun, and is BLOCKed', { timeout: 600_000 }, async (t) => {
  const caps = await doctor();
  if (!(caps.isRoot && caps.overlayfs)) return t.skip('needs the host overlay (root)');
  // The deadline is the run's wall limit plus OBSERVE_MARGIN_MS (20 s): the file must take longer
  // than that to hash on any host (64 GiB: ~5 min here at ~200 MB/s; sparse, so no disk is used).
  const scope = sparseScope(64);
  const wallMs = 1000;
  const t0 = Date.now();
  try {
    const o = await py(`import os; os.remove(${JSON.stringify(join(scope, 'disk.img'))}); print("removed")`, { scopes: [{ hostPath: scope }], limits: { wallMs } });
    const took = Date.now() - t0;
    assert.ok(took < wallMs + 20_000 + 3_000, `the observation took ${took} ms (deadline ${wallMs + 20_000} ms): ${text(o)}`);
    // What the program did is reported, and the scope's diff says it stopped (as /out's does).
    assert.equal(o.status, 'SUCCESS', text(o));
    assert.equal(o.stdout.bytes.toString(), 'removed\n');
    const s = o.fs.scopes[0];
    assert.equal(s?.changes, null, JSON.stringify(s));
    assert.equal(s?.budgetExceeded, 'time');
    assert.match(s?.error ?? '', /^the scope diff stopped: the host's time to observe this run ran out/);
    // The deletion is declared: only the unobserved diff stands between the run and a PROMOTE.
    const j = judge({ ...deepAction(), scope: { paths: [scope], recursive: true }, effects: { create: [], modify: [], delete: [join(scope, 'disk.img')], network: false, systemStateChange: false } }, o);
    assert.equal(j.verdict, 'BLOCK');
    assert.ok(j.reasons.some((r) => /filesystem diff cannot be verified: the scope diff stopped/.test(r)), j.reasons.join('\n'));
    await sandboxIdle();
    assert.ok(existsSync(join(scope, 'disk.img')), 'nothing was promoted: the real file is still there');
  } finally {
    rmSync(scope, { recursive: true, force: true });
  }
});

test('contained: fifo, socket, whiteout char device, a newline name, a sparse file and hard links in /out', async () => {
  const outDir = freshOut();
  const code = [
    'import os, socket',
    'os.mkfifo("/out/fifo")',
    's = socket.socket(socket.AF_UNIX); s.bind("/out/sock")',
    'try: os.mknod("/out/wh", 0o600 | 0o020000, os.makedev(0, 0)); print("WHITEOUT")',
    'except OSError as e: print("mknod", e.errno)',
    'open("/out/new\\nline", "w").write("n")',
    'f = open("/out/sparse", "w"); f.truncate(1 << 40); f.close()',
  ].join('\n');
  const o = await py(code, { outDir });
  assert.equal(o.status, 'SUCCESS', text(o));
  // The sparse file is over the disk cap: the diff stops, nothing is copied.
  assert.ok(o.limitsExceeded.includes('outBytes'), text(o));
  assert.equal(o.fs.out, null);
  assert.ok(!existsSync(outDir));
  const o2 = await py(code.replace('1 << 40', '10') + '\nos.link("/out/sparse", "/out/hl")', { outDir: freshOut() });
  const by = new Map((o2.fs.out ?? []).map((c) => [c.path, c.type]));
  assert.deepEqual([by.get('/out/fifo'), by.get('/out/sock'), by.get('/out/new\nline'), by.get('/out/hl')], ['fifo', 'socket', 'file', 'hardlink'], JSON.stringify(o2.fs));
  if (o2.stdout.bytes.toString().includes('WHITEOUT')) assert.equal(by.get('/out/wh'), 'char-device');
});

/** A python program run under the host tracer, which is what resolves links (root, a C compiler at set-up). */
async function traced(code: string): Promise<Awaited<ReturnType<typeof py>>> {
  const o = await py(code);
  assert.equal(o.host.syscallTracer, 'airlock-tracer', `links are resolved by the host tracer: ${o.host.syscallTracer}`);
  return o;
}

test('attack: links the program makes (and /proc\'s own) lead its opens to /root and /etc: each is reported by where it leads, with the path as written, and judged', async () => {
  // Each line: a spelling of a host-secret place (or of a write outside the writable areas) that looks
  // harmless as written. None can succeed (the root is read-only and holds no secrets): what is tested
  // is that the report says what was tried.
  const code = [
    'import os',
    'os.symlink("/root", "/tmp/e"); os.symlink("/etc", "/tmp/w"); os.symlink("e", "/tmp/rel"); os.symlink("/tmp/loop", "/tmp/loop")',
    'os.symlink("/etc/profile.d/evil.sh", "/tmp/dangling"); os.symlink("/etc/cron.d/x", "/out/nofollow"); os.symlink("/dev/kmsg", "/tmp/k")',
    'def tryit(p, flags=os.O_RDONLY):',
    '  try: os.close(os.open(p, flags, 0o600)); print("OPENED", p)',
    '  except OSError as e: print(p, e.errno)',
    'tryit("/tmp/e/.ssh/id_rsa")', // a link to a folder
    'tryit("/tmp/rel/.aws/credentials")', // a relative link to a link
    'tryit("/proc/self/root/root/.bashrc")', // the magic link to the sandbox's own root
    'os.chdir("/tmp"); tryit("/proc/self/cwd/../home/u/.netrc")', // the cwd's magic link, then ..
    'tryit("e/.gnupg/x")', // relative to the cwd, through the link
    'tryit("/tmp/e/../var/lib/x")', // .. after a link goes up from where the link led
    'tryit("/tmp/w/cron.d/job", os.O_WRONLY | os.O_CREAT)', // a write through a folder link
    'tryit("/tmp/dangling", os.O_WRONLY | os.O_CREAT)', // O_CREAT follows a dangling link: the target would be made
    'tryit("/out/nofollow", os.O_WRONLY | os.O_CREAT | os.O_EXCL)', // O_EXCL never follows: a write in /out, nothing to report
    'tryit("/tmp/loop")', // more links than the kernel follows (ELOOP): nothing reached
    'tryit("/tmp/k", os.O_RDONLY)', // a device, through a link
    'open("/out/done", "w").write("ran")',
  ].join('\n');
  const o = await traced(code);
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.doesNotMatch(o.stdout.bytes.toString(), /OPENED/, text(o));
  const got = (o.sideEffects?.fileAccess ?? []).map((a) => [a.access, a.path, a.asWritten ?? null]);
  assert.deepEqual(got, [
    ['read', '/root/.ssh/id_rsa', '/tmp/e/.ssh/id_rsa'],
    ['read', '/root/.aws/credentials', '/tmp/rel/.aws/credentials'],
    ['read', '/root/.bashrc', '/proc/self/root/root/.bashrc'],
    ['read', '/home/u/.netrc', '/proc/self/cwd/../home/u/.netrc'],
    ['read', '/root/.gnupg/x', '/tmp/e/.gnupg/x'],
    ['read', '/var/lib/x', '/tmp/e/../var/lib/x'],
    ['write', '/etc/cron.d/job', '/tmp/w/cron.d/job'],
    ['write', '/etc/profile.d/evil.sh', '/tmp/dangling'],
  ], JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  assert.deepEqual(o.sideEffects?.unreadableSyscalls ?? [], [], 'every path was resolved (a link loop is the kernel\'s ELOOP, not a finding)');
  assert.ok(o.sideEffects?.deviceAccess.some((d) => d.path === '/dev/kmsg'), JSON.stringify(o.sideEffects?.deviceAccess));
  const j = judge(deepAction(), o);
  assert.equal(j.verdict, 'BLOCK', j.reasons.join('\n'));
  assert.ok(j.unexpected.some((u) => u.includes('/root/.ssh/id_rsa (as /tmp/e/.ssh/id_rsa)')), j.unexpected.join('\n'));
  assert.ok(j.unexpected.some((u) => u.includes('/etc/cron.d/job (as /tmp/w/cron.d/job, ENOENT)')), j.unexpected.join('\n'));
});

test('attack (a review\'s findings): a deleted cwd or dirfd, a cwd and path longer than PATH_MAX together, openat2 RESOLVE_IN_ROOT from /etc: each reported where the kernel went; a memfd reopened through /proc/self/fd is no finding', async () => {
  const code = [
    'import ctypes, os, struct',
    'os.symlink("/root", "/tmp/e"); os.symlink("/etc", "/tmp/w")',
    'def tryit(p, flags=os.O_RDONLY, **kw):',
    '  try: os.close(os.open(p, flags, 0o600, **kw)); print("OPENED", p[:40])',
    '  except OSError as e: print(p[:40], e.errno)',
    // Deleted: the host's text of the cwd is "/tmp/d (deleted)", yet the kernel goes up from it.
    'os.mkdir("/tmp/d"); os.chdir("/tmp/d"); os.rmdir("/tmp/d")',
    'tryit("../e/.ssh/id_rsa")',
    'os.mkdir("/tmp/f"); fd = os.open("/tmp/f", os.O_PATH | os.O_DIRECTORY); os.rmdir("/tmp/f")',
    'tryit("../w/cron.d/job", os.O_WRONLY | os.O_CREAT, dir_fd=fd)',
    // Long: a 3,000-byte cwd and a 1,200-byte relative path, 4,200 bytes as one text.
    'os.chdir("/tmp")',
    'for i in range(12): os.mkdir("x" * 250); os.chdir("x" * 250)',
    'tryit("../" * 12 + "e/" + "./" * 600 + ".aws/credentials")',
    // openat2 with RESOLVE_IN_ROOT: "/shadow" from a dirfd of /etc is /etc/shadow.
    'libc = ctypes.CDLL(None, use_errno=True)',
    'etc = os.open("/etc", os.O_PATH | os.O_DIRECTORY)',
    'how = struct.pack("QQQ", os.O_RDONLY, 0, 0x10)',
    'print("openat2", libc.syscall(437, etc, b"/shadow", how, len(how)), ctypes.get_errno())',
    // Ordinary: a memfd reopened by its /proc name is a descriptor the program holds, not a path.
    'm = os.memfd_create("buf")',
    'with open(f"/proc/self/fd/{m}", "r+b") as f: f.write(b"x")',
    'print("done")',
  ].join('\n');
  const o = await traced(code);
  assert.match(o.stdout.bytes.toString(), /openat2 -1 2\ndone\n$/, text(o));
  const got = (o.sideEffects?.fileAccess ?? []).map((a) => [a.access, a.path, a.result]);
  assert.deepEqual(got, [
    ['read', '/root/.ssh/id_rsa', null],
    ['write', '/etc/cron.d/job', 'ENOENT'],
    ['read', '/root/.aws/credentials', null],
    ['read', '/etc/shadow', null],
  ], JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  assert.deepEqual(o.sideEffects?.unreadableSyscalls ?? [], [], text(o));
});

test('attack: a path whose links make the host walk deep folders again and again: the walk stops at its budget and the call is unobserved (JG_UNREADABLE_ARGUMENT), BLOCK', async () => {
  // One tracer serves every run: each of these links names a 100-folder path again, so following
  // them costs 300+ opens, past the walk's 256. The last leads to /root.
  const code = [
    'import os',
    'deep = "/tmp" + "/d" * 100',
    'os.makedirs(deep)',
    'for i in range(1, 4): os.symlink(f"{deep}/n{i + 1}", f"{deep}/n{i}")',
    'os.symlink("/root/.ssh/id_rsa", f"{deep}/n4")',
    'try: open(f"{deep}/n1").read()',
    'except OSError as e: print("open", e.errno)',
  ].join('\n');
  const o = await traced(code);
  assert.equal(o.stdout.bytes.toString(), 'open 2\n', text(o));
  assert.deepEqual(o.sideEffects?.unreadableSyscalls, [{ syscall: 'openat', count: 1 }], JSON.stringify(o.sideEffects?.fileAccess));
  const j = judge(deepAction(), o);
  assert.equal(j.verdict, 'BLOCK', j.reasons.join('\n'));
  assert.ok(j.reasons.some((r) => r.startsWith('JG_UNREADABLE_ARGUMENT: ') && r.includes('openat x1')), j.reasons.join('\n'));
});

test('attack: times and xattrs changed through links and by raw syscalls (utime, utimes, futimesat, setxattrat, removexattrat): each attempt outside the writable areas is reported by where it leads; on a descriptor or a link in /tmp nothing is', async () => {
  // x86_64 numbers (utime, utimes and futimesat do not exist on aarch64: the test skips them there).
  const code = [
    'import ctypes, os, platform',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'libc.syscall.restype = ctypes.c_long',
    'os.symlink("/etc", "/tmp/w"); os.symlink("/etc/passwd", "/tmp/pw")',
    'def raw(name, nr, *args):',
    '  r = libc.syscall(ctypes.c_long(nr), *args)',
    '  print(name, r, ctypes.get_errno() if r < 0 else 0)',
    'def tryit(f):',
    '  try: f(); print("CHANGED")',
    '  except OSError as e: print(e.errno)',
    'tryit(lambda: os.utime("/tmp/pw"))', // utimensat, following the link to /etc/passwd
    'os.utime("/tmp/pw", follow_symlinks=False)', // the link itself, in /tmp: allowed, nothing to report
    'tryit(lambda: os.setxattr("/tmp/w/hosts", "user.x", b"1"))',
    'tryit(lambda: os.removexattr("/tmp/w/group", "user.x"))',
    'try: os.setxattr("/tmp/pw", "user.x", b"1", follow_symlinks=False)', // lsetxattr on the link in /tmp: nothing
    'except OSError: pass',
    'fd = os.open("/out/t", os.O_CREAT | os.O_WRONLY); os.utime(fd)', // futimens: a descriptor, no path
    'AT_FDCWD = ctypes.c_long(-100)',
    'if platform.machine() == "x86_64":',
    '  raw("utime", 132, b"/tmp/w/fstab", None)',
    '  raw("utimes", 235, b"/tmp/w/hostname", None)',
    '  raw("futimesat", 261, AT_FDCWD, b"/tmp/w/resolv.conf", None)',
    '  libc.syscall(ctypes.c_long(261), ctypes.c_long(fd), None, None)', // NULL: acts on the descriptor, nothing
    'args = (ctypes.c_uint64 * 2)(ctypes.cast(ctypes.c_char_p(b"1"), ctypes.c_void_p).value, 1)', // struct xattr_args
    'raw("setxattrat", 463, AT_FDCWD, b"/tmp/w/nsswitch.conf", 0, b"user.x", args, ctypes.c_long(16))',
    'raw("removexattrat", 466, AT_FDCWD, b"/tmp/w/ld.so.cache", 0, b"user.x")',
    // The host's own device node: its times are every sandbox's (a review's finding)
    'try: os.utime("/dev/null")', // EROFS: the bind is read-only
    'except OSError: pass',
    'try: os.utime("/dev/stdout")', // a descriptor the program holds (a host FIFO): no file to judge
    'except OSError: pass',
    // A NULL path with AT_EMPTY_PATH: Linux 6.18's setxattrat acts on the cwd (a review's finding)
    'os.chdir("/etc"); raw("setxattrat-null", 463, AT_FDCWD, None, 0x1000, b"user.x", args, ctypes.c_long(16))',
    'open("/out/done", "w").write("ran")',
  ].join('\n');
  const o = await traced(code);
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.doesNotMatch(o.stdout.bytes.toString(), /CHANGED| 0 0$/m, `nothing outside the writable areas changed: ${text(o)}`);
  assert.match(o.stdout.bytes.toString(), /^setxattrat-null -1 30$/m, 'the kernel reached /etc (EROFS)');
  const got = (o.sideEffects?.fileAccess ?? []).map((a) => [a.syscall, a.path, a.asWritten ?? null]);
  assert.deepEqual(got, [
    ['utimensat', '/etc/passwd', '/tmp/pw'],
    ['setxattr', '/etc/hosts', '/tmp/w/hosts'],
    ['removexattr', '/etc/group', '/tmp/w/group'],
    ...(process.arch === 'x64'
      ? [
          ['utime', '/etc/fstab', '/tmp/w/fstab'],
          ['utimes', '/etc/hostname', '/tmp/w/hostname'],
          ['futimesat', '/etc/resolv.conf', '/tmp/w/resolv.conf'],
        ]
      : []),
    ['setxattrat', '/etc/nsswitch.conf', '/tmp/w/nsswitch.conf'],
    ['removexattrat', '/etc/ld.so.cache', '/tmp/w/ld.so.cache'],
    ['utimensat', '/dev/null', null],
    ['setxattrat', '/etc', null],
  ], JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  assert.deepEqual(o.sideEffects?.unreadableSyscalls ?? [], []);
  // A refused write (no secret read) is a person's call, as for an open for writing.
  const j = judge(deepAction(), o);
  assert.equal(j.verdict, 'REQUIRE_CONFIRMATION', j.reasons.join('\n'));
  assert.ok(j.unexpected.some((u) => u.includes('/etc/hosts (as /tmp/w/hosts, EROFS)')), j.unexpected.join('\n'));
});

test('attack: an O_PATH descriptor of a host file reopened for writing through /proc/self/fd/N or /dev/fd/N, or changed by that path (chmod, truncate, utime), is a write on that file; the program\'s own files, a memfd, an O_TMPFILE and stdout reopened the same way are not findings', async () => {
  const code = [
    'import os',
    'def tryit(p, flags=os.O_WRONLY):',
    '  try: os.close(os.open(p, flags)); print("ok", p)',
    '  except OSError as e: print(e.errno, p)',
    'pf = os.open("/etc/hosts", os.O_PATH)',
    'tryit(f"/proc/self/fd/{pf}")',
    'sf = os.open("/etc/passwd", os.O_PATH)',
    'tryit(f"/dev/fd/{sf}", os.O_RDWR)',
    'tryit(f"/proc/thread-self/fd/{pf}", os.O_RDONLY)', // a read of a file that is no secret: nothing
    'mine = os.open("/tmp/mine", os.O_RDONLY | os.O_CREAT, 0o644)',
    'tryit(f"/proc/self/fd/{mine}")',
    'out = os.open("/out/kept", os.O_RDONLY | os.O_CREAT, 0o644)',
    'tryit(f"/proc/self/fd/{out}")',
    'm = os.memfd_create("buf")',
    'tryit(f"/proc/self/fd/{m}", os.O_RDWR)',
    't = os.open("/tmp", os.O_TMPFILE | os.O_RDWR, 0o600)',
    'tryit(f"/proc/self/fd/{t}", os.O_RDWR)',
    'tryit("/dev/stdout")',
    // Other calls by such a path reach the file too.
    'def change(what, f, target):',
    '  try: f(f"/proc/self/fd/{os.open(target, os.O_PATH)}"); print("ok", what)',
    '  except OSError as e: print(e.errno, what)',
    'change("chmod", lambda p: os.chmod(p, 0o777), "/etc/group")',
    'change("truncate", lambda p: os.truncate(p, 0), "/etc/nsswitch.conf")',
    'change("utime", lambda p: os.utime(p), "/etc/ld.so.conf")',
  ].join('\n');
  const o = await traced(code);
  assert.equal(o.status, 'SUCCESS', text(o));
  // Refused (EROFS, or EACCES where the sandbox's /etc is a generated tmpfs of root's files).
  assert.match(o.stdout.bytes.toString(), /^(30|13) \/proc\/self\/fd\/\d+\n(30|13) \/dev\/fd\/\d+\nok /, text(o));
  const got = (o.sideEffects?.fileAccess ?? []).map((a) => [a.syscall, a.access, a.path, a.asWritten ?? null]);
  assert.doesNotMatch(o.stdout.bytes.toString(), /^ok (chmod|truncate|utime)$/m, text(o));
  const fd = (path: string) => /^\/proc\/self\/fd\/\d+$/.test(path);
  assert.deepEqual(got.map(([c, a, p, w]) => [c, a, p, w === null ? null : fd(w as string) || w]), [
    ['openat', 'write', '/etc/hosts', true],
    ['openat', 'write', '/etc/passwd', '/dev/fd/4'],
    ['chmod', 'write', '/etc/group', true],
    ['truncate', 'write', '/etc/nsswitch.conf', true],
    ['utimensat', 'write', '/etc/ld.so.conf', true],
  ], JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  assert.ok((o.sideEffects?.fileAccess ?? []).every((a) => a.result === 'EROFS' || a.result === 'EACCES'));
  assert.deepEqual(o.sideEffects?.unreadableSyscalls ?? [], []);
});

test('attack: a change by a path that names a descriptor of a device or a link (utime of /dev/stdin on /dev/null; chown of /proc/self/fd/N of an O_PATH link) is reported on that file; stdout\'s FIFO is not', async () => {
  const code = [
    'import os',
    'def tryit(what, f):',
    '  try: f(); print("ok", what)',
    '  except OSError as e: print(e.errno, what)',
    'os.dup2(os.open("/dev/null", os.O_RDONLY), 0)', // the host's /dev/null, bound in (read-only)
    'tryit("stdin", lambda: os.utime("/dev/stdin"))', // EROFS
    'z = os.open("/dev/zero", os.O_RDONLY)',
    'tryit("zero", lambda: os.chmod(f"/dev/fd/{z}", 0o600))',
    'l = os.open("/usr/bin/pager" if os.path.islink("/usr/bin/pager") else "/etc/localtime", os.O_PATH | os.O_NOFOLLOW)',
    'tryit("link", lambda: os.chown(f"/proc/self/fd/{l}", -1, -1))',
    'tryit("stdout", lambda: os.utime("/dev/stdout"))',
  ].join('\n');
  const o = await traced(code);
  assert.equal(o.status, 'SUCCESS', text(o));
  const lines = o.stdout.bytes.toString().trim().split('\n');
  assert.equal(lines[0], '30 stdin', text(o));
  assert.match(lines[1] ?? '', /^30 zero$/, text(o)); // EROFS: the bind is read-only (the node is root's too)
  assert.match(lines[2] ?? '', /^(30|13) link$/, text(o));
  const got = (o.sideEffects?.fileAccess ?? []).map((a) => [a.syscall, a.path, a.result, /^\/(proc\/self\/fd\/\d+|dev\/(stdin|fd\/\d+))$/.test(a.asWritten ?? '')]);
  assert.deepEqual(got.slice(0, 2), [
    ['utimensat', '/dev/null', 'EROFS', true],
    ['chmod', '/dev/zero', 'EROFS', true],
  ], JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  assert.equal(got.length, 3, JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  assert.equal(got[2]?.[0], 'chown');
  assert.match(String(got[2]?.[1]), /^\/(usr\/bin\/pager|etc\/localtime)$/);
  const j = judge(deepAction(), o);
  assert.notEqual(j.verdict, 'PROMOTE', j.reasons.join('\n'));
});

test('attack: changes through a descriptor (fchmod, fchown, futimens, fsetxattr, fremovexattr, chattr\'s inode ioctls, and "" with AT_EMPTY_PATH on an O_PATH descriptor) are write attempts on the file behind it; the program\'s own files, a memfd, a message queue named /boot, a pipe, stdout and a closed descriptor are not findings', async () => {
  const code = [
    'import ctypes, os',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'libc.syscall.restype = ctypes.c_long',
    'def tryit(what, f):',
    '  try: f(); print("ok", what)',
    '  except OSError as e: print(e.errno, what)',
    'def raw(what, nr, *args):',
    '  r = libc.syscall(ctypes.c_long(nr), *args)',
    '  print("ok" if r == 0 else ctypes.get_errno(), what)',
    'rd = lambda p: os.open(p, os.O_RDONLY)',
    'tryit("fchmod", lambda: os.fchmod(rd("/etc/hosts"), 0o777))',
    'tryit("fchown", lambda: os.fchown(rd("/etc/group"), 0, 0))',
    'tryit("futimens", lambda: os.utime(rd("/etc/ld.so.conf")))',
    'tryit("fsetxattr", lambda: os.setxattr(rd("/etc/passwd"), "user.x", b"1"))',
    'tryit("fremovexattr", lambda: os.removexattr(rd("/etc/nsswitch.conf"), "user.x"))',
    'tryit("fchmod-dir", lambda: os.fchmod(rd("/etc"), 0o777))',
    // O_PATH descriptors, which the f* calls refuse (EBADF): "" with AT_EMPTY_PATH (0x1000) reaches the file.
    'raw("fchownat-empty", 260, os.open("/etc/ld.so.cache", os.O_PATH), b"", 0, 0, 0x1000)',
    'raw("utimensat-empty", 280, os.open("/etc/localtime", os.O_PATH | os.O_NOFOLLOW), b"", None, 0x1100)',
    'raw("fchmodat2-empty", 452, os.open("/etc/ld.so.conf.d", os.O_PATH), b"", 0o777, 0x1000)',
    // chattr +i and a project id: inode ioctls on a descriptor open for reading.
    'import fcntl, struct',
    'tryit("chattr", lambda: fcntl.ioctl(rd("/etc/alternatives"), 0x40086602, struct.pack("l", 0x10)))', // FS_IOC_SETFLAGS, FS_IMMUTABLE_FL
    'tryit("fssetxattr", lambda: fcntl.ioctl(rd("/usr/bin"), 0x401c5820, bytes(28)))', // FS_IOC_FSSETXATTR
    'tryit("getflags", lambda: fcntl.ioctl(rd("/usr/lib"), 0x80086601, bytes(8)))', // FS_IOC_GETFLAGS: a read, no stop
    // Not findings: the program's own files, a memfd, a pipe, stdout (the host's FIFO), a closed descriptor.
    'mine = os.open("/tmp/mine", os.O_RDWR | os.O_CREAT, 0o644); os.fchmod(mine, 0o600); os.utime(mine); os.setxattr(mine, "user.x", b"1")',
    'out = os.open("/out/kept", os.O_RDWR | os.O_CREAT, 0o644); os.fchmod(out, 0o600); os.utime(out)',
    'os.fchmod(os.memfd_create("m"), 0o600)',
    // A POSIX message queue named like a host folder: its descriptor's name is "/boot", on no mount.
    'mq = ctypes.CDLL("librt.so.1").mq_open(b"/boot", os.O_CREAT | os.O_RDWR, 0o600, None); os.fchmod(mq, 0o644)',
    'r, w = os.pipe(); tryit("pipe", lambda: os.fchmod(r, 0o600))',
    'tryit("stdout", lambda: os.utime(1))',
    'raw("closed", 91, 999, 0o777)',
    'tryit("openat-closed", lambda: os.open("x", os.O_RDONLY, dir_fd=999))', // a path from a closed descriptor
  ].join('\n');
  const o = await traced(code);
  assert.equal(o.status, 'SUCCESS', text(o));
  // Refused (EROFS, or EACCES where the sandbox's /etc is a generated tmpfs of root's files).
  const lines = o.stdout.bytes.toString().trim().split('\n');
  assert.deepEqual(lines.slice(0, 11).filter((l) => !/^(30|13) /.test(l)), [], text(o));
  assert.deepEqual(lines.slice(11), ['ok getflags', 'ok pipe', '13 stdout', '9 closed', '9 openat-closed'], text(o));
  const got = (o.sideEffects?.fileAccess ?? []).map((a) => [a.syscall, a.access, a.path, a.asWritten ?? null]);
  assert.deepEqual(got, [
    ['fchmod', 'write', '/etc/hosts', null],
    ['fchown', 'write', '/etc/group', null],
    ['utimensat', 'write', '/etc/ld.so.conf', null],
    ['fsetxattr', 'write', '/etc/passwd', null],
    ['fremovexattr', 'write', '/etc/nsswitch.conf', null],
    ['fchmod', 'write', '/etc', null],
    ['fchownat', 'write', '/etc/ld.so.cache', null],
    ['utimensat', 'write', '/etc/localtime', null],
    ['fchmodat2', 'write', '/etc/ld.so.conf.d', null],
    ['ioctl', 'write', '/etc/alternatives', null],
    ['ioctl', 'write', '/usr/bin', null],
  ], JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  assert.ok((o.sideEffects?.fileAccess ?? []).every((a) => a.result === 'EROFS' || a.result === 'EACCES'), JSON.stringify(o.sideEffects?.fileAccess));
  assert.deepEqual(o.sideEffects?.unreadableSyscalls ?? [], []);
  const j = judge(deepAction(), o);
  assert.equal(j.verdict, 'REQUIRE_CONFIRMATION', j.reasons.join('\n'));
  assert.ok(j.unexpected.some((u) => u.includes('/etc/hosts (EROFS)') || u.includes('/etc/hosts (EACCES)')), j.unexpected.join('\n'));
});
