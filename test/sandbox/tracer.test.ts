// The host syscall tracer (native/tracer.c): hostile programs that try to act unseen, the tracer's
// loss, agreement with strace on the same program, and its event lines read defensively.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { execFileSync, spawn, spawnSync } from 'node:child_process';
import { chownSync, closeSync, constants, mkdtempSync, openSync, readFileSync, readSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import fc from 'fast-check';
import { decodeSockaddr, sideEffectsFromTrace } from '../../src/sandbox/observe/trace-events.js';
import { syscallTracer, tracerBinaryPath } from '../../src/sandbox/observe/tracer.js';
import { launchWithTracer } from '../../src/sandbox/ns/launch.js';
import { buildSeccompFilter } from '../../src/sandbox/ns/seccomp.js';
import { py, pyUnderStrace, run, text } from './helpers-ns.js';

const tracer = syscallTracer();
const skip = tracer === null ? 'no host tracer here (native/tracer.c not built, or yama refuses its attach)' : false;
const root = process.getuid?.() === 0;
const hasSetpriv = spawnSync('setpriv', ['--help']).status === 0;

test('runs are observed by the host tracer when it is built; bwrap starts under the rlimits', { skip }, async () => {
  const o = await run(['/bin/true']);
  assert.equal(o.host.syscallTracer, 'airlock-tracer');
  assert.equal(o.exit.source, 'tracer');
  assert.deepEqual(o.sideEffects?.processesSpawned.executables, [{ path: '/bin/true', count: 1 }]);
  const l = await run(['/bin/cat', '/proc/self/limits'], { limits: { cpuMs: 2500 } });
  assert.match(l.stdout.bytes.toString(), /Max cpu time\s+3\s+4\s+seconds/, text(l));
  assert.match(l.stdout.bytes.toString(), /Max core file size\s+0\s+0\s/);
});

test('hostile: device opens by relative path, from a thread, and through an inherited fd are all seen', { skip }, async () => {
  const code = [
    'import os, threading, socket',
    "os.chdir('/dev')",
    'def t():',
    "  for p in ('sda', './mem', '../dev/kmem'):",
    '    try: open(p, "rb")',
    '    except OSError: pass',
    'th = threading.Thread(target=t); th.start(); th.join()',
    "fd = os.open('/', os.O_RDONLY)",
    "try: os.open('dev/vda', os.O_RDONLY, dir_fd=fd)",
    'except OSError: pass',
    's = socket.socket()',
    'if os.fork() == 0:',
    "  try: s.connect(('203.0.113.9', 8443))",
    '  except OSError: pass',
    '  os._exit(0)',
    'os.wait()',
    "print('done')",
  ].join('\n');
  const o = await py(code);
  assert.equal(o.stdout.bytes.toString(), 'done\n', text(o));
  const dev = (o.sideEffects?.deviceAccess ?? []).map((d) => d.path);
  for (const d of ['/dev/sda', '/dev/mem', '/dev/kmem', '/dev/vda']) assert.ok(dev.includes(d), `${d} not seen: ${JSON.stringify(dev)}`);
  const c = o.sideEffects?.networkAttempts.find((n) => n.syscall === 'connect');
  assert.deepEqual(c && { address: c.address, port: c.port, protocol: c.protocol }, { address: '203.0.113.9', port: 8443, protocol: 'tcp' }, 'the child\'s connect on the inherited socket');
  assert.ok((o.sideEffects?.processesSpawned.threads ?? 0) >= 1);
  assert.ok((o.sideEffects?.processesSpawned.count ?? 0) >= 2);
});

test('hostile: a thread that execs, abstract unix sockets, sendmsg with an address, signals to pid 1', { skip }, async () => {
  const code = [
    'import os, socket, signal, threading, time',
    'u = socket.socket(socket.AF_UNIX)',
    "try: u.connect('\\0airlock-probe')",
    'except OSError: pass',
    'd = socket.socket(socket.AF_INET6, socket.SOCK_DGRAM)',
    "try: d.sendmsg([b'x'], [], 0, ('2001:db8::7', 53))",
    'except OSError: pass',
    'for s in (signal.SIGTERM, 0): ',
    '  try: os.kill(1, s)',
    '  except OSError: pass',
    "threading.Thread(target=lambda: os.execv('/bin/echo', ['echo', 'replaced'])).start()",
    'time.sleep(5)',
  ].join('\n');
  const o = await py(code);
  assert.equal(o.stdout.bytes.toString(), 'replaced\n', text(o));
  const se = o.sideEffects!;
  assert.ok(se.processesSpawned.executables.some((e) => e.path === '/bin/echo'), JSON.stringify(se.processesSpawned));
  assert.ok(se.networkAttempts.some((n) => n.family === 'unix' && n.path === '@airlock-probe'), JSON.stringify(se.networkAttempts));
  assert.ok(se.networkAttempts.some((n) => n.syscall === 'sendmsg' && n.address === '2001:db8::7' && n.port === 53 && n.protocol === 'udp'), JSON.stringify(se.networkAttempts));
  assert.ok(se.signalsSent.some((s) => s.targetPid === 1 && s.signal === 'SIGTERM' && s.syscall === 'kill'), JSON.stringify(se.signalsSent));
  assert.ok(se.signalsSent.some((s) => s.targetPid === 1 && s.signal === '0'), JSON.stringify(se.signalsSent));
  assert.equal(se.unparsedLines, 0);
});

test('hostile: a child made with CLONE_UNTRACED (to escape the tracer) is trapped and reported', { skip }, async () => {
  const o = await py('import ctypes\nl=ctypes.CDLL(None, use_errno=True)\nprint(l.syscall(56, 0x00800000 | 17, 0, 0, 0, 0))');
  assert.equal(o.status, 'POLICY_ABORTED', text(o));
  assert.ok(o.sideEffects?.privilegedSyscalls.some((p) => p.name === 'clone' && p.outcome === 'trapped'), JSON.stringify(o.sideEffects?.privilegedSyscalls));
});

test('losing the tracer mid-run kills the sandbox and the run has no side effects to trust (null, with why)', { skip }, async () => {
  const p = run(['/bin/sh', '-c', 'sleep 3; echo survived']);
  await new Promise((r) => setTimeout(r, 300));
  execFileSync('pkill', ['-KILL', '-P', String(process.pid), '-x', 'airlock-tracer']);
  const o = await p;
  assert.ok(!o.stdout.bytes.toString().includes('survived'), text(o));
  assert.equal(o.sideEffects, null);
  assert.match(o.sideEffectsUnavailable ?? '', /tracer stopped/);
  // The next run starts a new tracer.
  const again = await run(['/bin/true']);
  assert.equal(again.status, 'SUCCESS', text(again));
  assert.ok(again.sideEffects);
});

/**
 * The tracer's raw protocol: a staging dir with the observing filter, one `R` request (held until
 * `send('G <id>')` with `hold`; `nproc`: RLIMIT_NPROC for the init; `ids`: bwrap's uid and gid), its answers.
 */
function rawLaunch(cmd: string[], id: number, bwrapArgs: string[], opts: { hold?: boolean; nproc?: number; ids?: [number, number] } = {}) {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-tracer-test-'));
  if (root) chownSync(dir, 65534, 65534); // a tracer run as nobody makes its FIFOs here
  const filter = join(dir, 'filter.bpf');
  writeFileSync(filter, buildSeccompFilter(process.arch, { observe: true }));
  const x = (s: string) => `x${Buffer.from(s).toString('hex')}`;
  const argv = ['/usr/bin/bwrap', ...bwrapArgs, '--info-fd', '3', '--block-fd', '4', '--seccomp', '5', '--', '/bin/true'];
  const t = spawn(cmd[0]!, cmd.slice(1), { stdio: ['pipe', 'pipe', 'inherit'] });
  const out = { text: '' };
  t.stdout.on('data', (d: Buffer) => (out.text += d.toString()));
  const [uid, gid] = opts.ids ?? [65534, 65534];
  t.stdin.write(`R ${id} ${opts.hold ? 1 : 0} 1 2 -1 -1 ${opts.nproc ?? -1} ${uid} ${gid} ${x(join(dir, 'o'))} ${x(join(dir, 'e'))} ${x(filter)} - ${argv.map(x).join(' ')}\n`);
  const readers: number[] = [];
  return {
    out,
    until: (re: RegExp) =>
      new Promise<void>((resolve, reject) => {
        const timer = setTimeout(() => reject(new Error(`waited for ${re}: ${out.text}`)), 5000);
        const check = () => (re.test(out.text) ? resolve(clearTimeout(timer)) : setTimeout(check, 5));
        check();
      }),
    /** Open the host's readers of bwrap's stdout and stderr (bwrap's own open waits for them). */
    openReaders: () => readers.push(...['o', 'e'].map((f) => openSync(join(dir, f), constants.O_RDONLY | constants.O_NONBLOCK))),
    readers,
    send: (line: string) => t.stdin.write(`${line}\n`),
    close: () => {
      t.stdin.end();
      for (const fd of readers) closeSync(fd);
      rmSync(dir, { recursive: true, force: true });
    },
  };
}

test('a host that refuses ptrace (no CAP_SYS_PTRACE): the tracer answers with the step and errno the runner falls back on', { skip: skip || (!hasSetpriv && 'no setpriv') }, async () => {
  const r = rawLaunch(['setpriv', '--inh-caps=-sys_ptrace', '--bounding-set=-sys_ptrace', tracerBinaryPath()!], 7, ['--unshare-user', '--ro-bind', '/', '/']);
  try {
    await r.until(/^7 R ok \d+$/m);
    r.openReaders();
    await r.until(/^7 B /m);
    assert.match(r.out.text, /^7 B err ptrace (1|13) \d+$/m, r.out.text);
  } finally {
    r.close();
  }
});

test('RLIMIT_NPROC is set on bwrap\'s init before it goes on, by a root tracer without CAP_SYS_RESOURCE (a container\'s default set) too', { skip: skip || (!root && 'needs root') || (!hasSetpriv && 'no setpriv') }, async () => {
  const noResource = ['setpriv', '--inh-caps=-sys_resource', '--bounding-set=-sys_resource'];
  for (const [k, cmd] of [[tracerBinaryPath()!], [...noResource, tracerBinaryPath()!]].entries()) {
    const r = rawLaunch(cmd, 11 + k, ['--unshare-user', '--unshare-pid', '--ro-bind', '/', '/'], { hold: true, nproc: 5 });
    try {
      await r.until(new RegExp(`^${11 + k} R ok \\d+$`, 'm'));
      r.openReaders();
      await r.until(new RegExp(`^${11 + k} B `, 'm'));
      const init = new RegExp(`^${11 + k} B (\\d+)$`, 'm').exec(r.out.text);
      assert.ok(init, r.out.text);
      assert.match(readFileSync(`/proc/${init[1]}/limits`, 'utf8'), /Max processes\s+5\s+5\s/);
      r.send(`G ${11 + k}`);
      await r.until(new RegExp(`^${11 + k} Z$`, 'm'));
      assert.match(r.out.text, new RegExp(`^${11 + k} W 0 -$`, 'm'));
    } finally {
      r.close();
    }
  }
});

test('hostile: a tracer run by an ordinary user starts bwrap only as that user (a request for other ids fails at step ids)', { skip: skip || (!root && 'needs root (runs the tracer as nobody)') || (!hasSetpriv && 'no setpriv') }, async () => {
  const asNobody = ['setpriv', '--reuid', '65534', '--regid', '65534', '--clear-groups', tracerBinaryPath()!];
  const bad = rawLaunch(asNobody, 21, ['--unshare-user', '--ro-bind', '/', '/'], { ids: [4242, 4242] });
  try {
    await bad.until(/^21 R /m);
    bad.openReaders();
    await bad.until(/^21 Z$/m);
    assert.match(bad.out.text, /^21 R err ids 1$/m, bad.out.text);
    assert.doesNotMatch(bad.out.text, /^21 B /m);
  } finally {
    bad.close();
  }
  const good = rawLaunch(asNobody, 22, ['--unshare-user', '--unshare-pid', '--ro-bind', '/', '/'], { nproc: 5 });
  try {
    await good.until(/^22 R ok \d+$/m);
    good.openReaders();
    await good.until(/^22 Z$/m);
    assert.match(good.out.text, /^22 B \d+$/m, good.out.text);
    assert.match(good.out.text, /^22 W 0 -$/m);
  } finally {
    good.close();
  }
});

test('a launch waits for the host\'s readers: a program that ends at once, read late, still ends the streams', { skip }, async () => {
  const r = rawLaunch([tracerBinaryPath()!], 3, ['--unshare-user', '--unshare-pid', '--ro-bind', '/', '/']);
  try {
    await r.until(/^3 R ok \d+$/m);
    await new Promise((resolve) => setTimeout(resolve, 300));
    assert.doesNotMatch(r.out.text, /^3 (B|W|Z)/m, 'bwrap went on before anyone read its output');
    r.openReaders();
    await r.until(/^3 Z$/m);
    assert.match(r.out.text, /^3 W 0 -$/m, r.out.text);
    // Every writer is gone: the readers see the end of file, not "try again".
    for (const fd of r.readers) assert.equal(readSync(fd, Buffer.alloc(16)), 0);
  } finally {
    r.close();
  }
});

test('a launch whose child fails before bwrap\'s exec (here: joining a cgroup) ends with the failed step, never hangs', { skip }, async () => {
  // Many times: whether the tracer reaps the child before or after reading its failed step is a race
  // (it once hung when the exit reached node before the step's error: ~3% of launches).
  const dir = mkdtempSync(join(tmpdir(), 'airlock-tracer-test-'));
  try {
    const filter = join(dir, 'filter.bpf');
    writeFileSync(filter, buildSeccompFilter(process.arch, { observe: true }));
    for (let i = 0; i < 200; i++) {
      const l = launchWithTracer(tracer!, {
        argv: ['/usr/bin/bwrap', '--unshare-user', '--ro-bind', '/', '/', '--info-fd', '3', '--block-fd', '4', '--seccomp', '5', '--', '/bin/true'],
        stdoutFifo: join(dir, `o${i}`),
        stderrFifo: join(dir, `e${i}`),
        seccompFile: filter,
        cgroupProcs: [join(dir, 'no-such-group', 'cgroup.procs')],
        limits: { cpuSoftS: 1, cpuHardS: 2, fsizeBytes: null, asBytes: null, nproc: null, uid: 65534, gid: 65534 },
        hold: false,
      });
      l.stdout.resume();
      l.stderr.resume();
      const both = Promise.all([l.closed, l.ready]);
      const outcome = await Promise.race([both, new Promise<'hung'>((r) => setTimeout(() => r('hung'), 5000))]);
      if (outcome === 'hung') {
        l.stdout.destroy();
        l.stderr.destroy();
        assert.fail(`launch ${i} did not end within 5 s`);
      }
      const [closed, ready] = outcome;
      assert.match(closed.spawnError ?? '', /step "cgroup" \(errno 2\)/);
      assert.equal(closed.code, 127);
      assert.ok('error' in ready && /cgroup/.test(ready.error), JSON.stringify(ready));
    }
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('the tracer and strace observe the same attempts of one hostile program', { skip }, async () => {
  const code = [
    'import os, socket, subprocess',
    "subprocess.run(['/bin/true'])",
    "subprocess.Popen(['/bin/sleep', '30'])",
    "try: open('/dev/mem')",
    'except OSError: pass',
    "for p in ('/etc/shadow', '/root/.ssh/id_ed25519'):",
    '  try: open(p)',
    '  except OSError: pass',
    "for p in ('/usr/lib/x', 'rel-in-cwd'):",
    "  try: open(p, 'w')",
    '  except OSError: pass',
    "try: os.mkdir('/etc/evil')",
    'except OSError: pass',
    "os.chdir('/')",
    "for p in ('root/.netrc', 'tmp/../home/u/.pgpass', '/var/'):",
    '  try: open(p)',
    '  except OSError: pass',
    "os.chdir('/tmp')",
    "try: os.rename('/out/a', '/etc/b')",
    'except OSError: pass',
    // times and xattrs: by path outside the writable areas (reported), in /out or by descriptor (not)
    "for f in (lambda: os.utime('/etc/passwd'), lambda: os.setxattr('/etc/hosts', 'user.x', b'1'), lambda: os.removexattr('/etc/group', 'user.x'),",
    "          lambda: os.utime('/etc/shells', follow_symlinks=False), lambda: os.setxattr('/etc/issue', 'user.x', b'1', follow_symlinks=False),",
    "          lambda: os.utime(os.open('/out/t', os.O_CREAT | os.O_WRONLY)), lambda: os.utime('/out/t'), lambda: os.setxattr('/out/t', 'user.x', b'1'),",
    "          lambda: os.utime('/dev/null'), lambda: os.mkdir('/dev/shm/ok')):",
    '  try: f()',
    '  except OSError: pass',
    // ... through a descriptor: on a host file (reported by its name), on the program's own or a memfd (not)
    "rd = lambda p: os.open(p, os.O_RDONLY)",
    "for f in (lambda: os.fchmod(rd('/etc/ld.so.conf'), 0o777), lambda: os.utime(rd('/etc/nsswitch.conf')), lambda: os.fchown(rd('/etc/ld.so.cache'), 0, 0),",
    "          lambda: os.setxattr(rd('/etc'), 'user.x', b'1'), lambda: os.removexattr(rd('/usr/bin'), 'user.x'), lambda: os.fchmod(rd('/out/t'), 0o600),",
    "          lambda: os.fchmod(os.memfd_create('m'), 0o600)):",
    '  try: f()',
    '  except OSError: pass',
    "ctypes_fd = os.open('/etc/localtime', os.O_PATH | os.O_NOFOLLOW)",
    's = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)',
    "try: s.sendto(b'q', ('192.0.2.1', 53))",
    'except OSError: pass',
    'import ctypes',
    "ctypes.CDLL(None).syscall(280, ctypes_fd, b'', None, 0x1100)", // utimensat(fd, "", NULL, AT_EMPTY_PATH | AT_SYMLINK_NOFOLLOW)
    "ctypes.CDLL(None).unshare(0x10000000)",
  ].join('\n');
  const summary = (o: Awaited<ReturnType<typeof run>>) => ({
    status: o.status,
    exit: { code: o.exit.code, signal: o.exit.signal },
    executables: o.sideEffects?.processesSpawned.executables,
    processes: o.sideEffects?.processesSpawned.count,
    outlived: o.sideEffects?.processesSpawned.outlivedProgram,
    devices: o.sideEffects?.deviceAccess.map((d) => [d.path, d.result]),
    net: o.sideEffects?.networkAttempts.map((n) => [n.syscall, n.family, n.protocol, n.address, n.port, n.result]),
    privileged: o.sideEffects?.privilegedSyscalls,
    files: o.sideEffects?.fileAccess.map((a) => [a.access, a.path, a.syscall, a.result]),
  });
  const ours = await py(code);
  const theirs = await pyUnderStrace(code);
  assert.equal(ours.host.syscallTracer, 'airlock-tracer');
  assert.equal(theirs.host.syscallTracer, 'strace');
  assert.deepEqual(summary(ours), summary(theirs));
  assert.equal(ours.status, 'POLICY_ABORTED');
  assert.equal(summary(ours).outlived, 1, 'the sleep left running is reported');
  // the refused file accesses, with the program's relative path made absolute against its cwd (/tmp)
  // relative paths against the cwd and unnormalised ones count as what they name
  assert.deepEqual(summary(ours).files?.map(([access, path]) => `${access} ${path}`), [
    'read /etc/shadow',
    'read /root/.ssh/id_ed25519',
    'write /usr/lib/x',
    'write /etc/evil',
    'read /root/.netrc',
    'read /home/u/.pgpass',
    'read /var',
    'write /etc/b',
    'write /etc/passwd',
    'write /etc/hosts',
    'write /etc/group',
    'write /etc/shells',
    'write /etc/issue',
    'write /dev/null',
    'write /etc/ld.so.conf',
    'write /etc/nsswitch.conf',
    'write /etc/ld.so.cache',
    'write /etc',
    'write /usr/bin',
    'write /etc/localtime',
  ]);
  // (the sandbox's /etc has no shells or issue: the attempt is reported all the same)
  assert.deepEqual(summary(ours).files?.slice(-12, -6).map(([, , syscall, result]) => `${syscall} ${result}`), ['utimensat EROFS', 'setxattr EROFS', 'removexattr EROFS', 'utimensat ENOENT', 'lsetxattr ENOENT', 'utimensat EROFS']); // (/dev/null's: its bind is read-only)
  assert.deepEqual(summary(ours).files?.slice(-6).map(([, , syscall]) => syscall), ['fchmod', 'utimensat', 'fchown', 'fsetxattr', 'fremovexattr', 'utimensat']);
});

test('the tracer and strace agree on relative paths with no dirfd, after chdir and fchdir, in a thread (which moves its process\'s cwd), a forked child (which keeps its own) and subprocess\'s vforked child (cwd=)', { skip }, async () => {
  const code = [
    'import ctypes, os, platform, threading',
    'libc = ctypes.CDLL(None, use_errno=True)',
    'legacy = platform.machine() == "x86_64"', // chmod(2), mkdir(2), unlink(2): no dirfd at all
    'def chmod(p): libc.syscall(90, p.encode(), 0o777) if legacy else libc.fchmodat(-100, p.encode(), 0o777, 0)',
    'def mkdir(p): libc.syscall(83, p.encode(), 0o777) if legacy else libc.mkdirat(-100, p.encode(), 0o777)',
    'open("/out/a", "w").close()',
    'os.chdir("/out"); chmod("a")', // the program's own: nothing to report
    'os.chdir("/etc"); chmod("group")',
    't = threading.Thread(target=lambda: os.chdir("/usr")); t.start(); t.join()',
    'mkdir("lib/x")', // the thread moved the process: /usr/lib/x
    'if os.fork() == 0:',
    '  os.fchdir(os.open("/usr/lib", os.O_RDONLY)); mkdir("y"); os._exit(0)',
    'os.wait()',
    'chmod("bin")', // still /usr: the child's fchdir was its own
    // CPython's subprocess vforks; the child's chdir comes before its parent's vfork line in strace's log
    'import subprocess, sys',
    'subprocess.run([sys.executable, "-c", "import os\\ntry: os.unlink(\'hosts\')\\nexcept OSError: pass"], cwd="/etc")',
  ].join('\n');
  const files = (o: Awaited<ReturnType<typeof py>>) => (o.sideEffects?.fileAccess ?? []).map((a) => `${a.syscall} ${a.path} ${a.result}`).sort();
  const ours = await py(code);
  const theirs = await pyUnderStrace(code);
  assert.equal(theirs.host.syscallTracer, 'strace');
  const call = (name: string) => (process.arch === 'x64' ? name : `${name === 'chmod' ? 'fchmodat' : 'mkdirat'}`);
  assert.deepEqual(files(ours), [`${call('chmod')} /etc/group EROFS`, `${call('chmod')} /usr/bin EROFS`, `${call('mkdir')} /usr/lib/x EROFS`, `${call('mkdir')} /usr/lib/y EROFS`, `${process.arch === 'x64' ? 'unlink' : 'unlinkat'} /etc/hosts EROFS`].sort(), text(ours));
  assert.deepEqual(files(theirs), files(ours), text(theirs));
  assert.deepEqual(theirs.sideEffects?.unreadableSyscalls ?? [], []);
});

test('event lines: decoded exactly; the program\'s own strings and numbers cannot break the reading', () => {
  const lines = [
    'P 10',
    `X 10 ${Buffer.from('/bin/sh').toString('hex')} -`,
    `X 11 - ${Buffer.from('/memfd:p (deleted)').toString('hex')}`,
    'U 12 openat e14',
    'Y 11 clone e11',
    'Y 11 fork ok',
    `L 12 468 ${0xc000003e}`,
    `L 12 470 ${0xc000003e}`,
    'F 10 11 p',
    'F 11 12 t',
    'K 10 2 1 0 3',
    `N 11 connect 3 ${Buffer.from([2, 0, 0x01, 0xbb, 10, 0, 0, 1]).toString('hex')} e101`,
    `N 11 bind 4 ${Buffer.concat([Buffer.from([1, 0]), Buffer.from('/run/x.sock\0')]).toString('hex')} ok`,
    'S 12 tgkill 12 9 e3',
    `D 12 openat ${Buffer.from('/tmp/../dev/./sda').toString('hex')} e2`,
    `D 12 openat ${Buffer.from('/dev/null').toString('hex')} ok`,
    `A 12 openat r ${Buffer.from('/etc/shadow').toString('hex')} -`,
    `A 12 openat r ${Buffer.from('/root/.netrc').toString('hex')}:${Buffer.from('/tmp/e/.netrc').toString('hex')} -`,
    `A 12 openat r ${Buffer.from('/root/x').toString('hex')}:${Buffer.from('/tmp/x').toString('hex')}:00 -`,
    `A 12 mkdirat w ${Buffer.from('/etc/x\n').toString('hex')} e30`,
    `A 12 openat q ${Buffer.from('/x').toString('hex')} ok`,
    `T 12 ${0x40000000 | 165} ${0xc000003e}`,
    `T 12 21 ${0x40000003}`,
    'T 12 101 3221225534',
    'Q 12',
    'E 10 - 31',
    'Q 10',
    'garbage line',
    'N x',
  ];
  const { sideEffects: se, programEnd } = sideEffectsFromTrace(lines, 9);
  assert.equal(se.programPid, 10);
  assert.equal(se.bwrapPid, 9);
  // 11 (a process) was still running when the program (10) ended; 12 is a thread
  assert.deepEqual(se.processesSpawned, { count: 2, threads: 1, executables: [{ path: '/bin/sh', count: 1 }, { path: '/memfd:p', count: 1, anonymous: true }], outlivedProgram: 1, refusedForks: 1 });
  assert.deepEqual(se.unreadableSyscalls, [{ syscall: 'openat', count: 1 }]);
  assert.deepEqual(se.refusedSyscalls, [{ name: 'file_getattr', count: 1 }, { name: 'syscall_470', count: 1 }]);
  assert.deepEqual(se.networkAttempts, [
    { syscall: 'socket', family: 'inet', protocol: 'tcp', address: null, port: null, path: null, result: 'ok' },
    { syscall: 'connect', family: 'inet', address: '10.0.0.1', port: 443, path: null, protocol: 'tcp', result: 'ENETUNREACH' },
    { syscall: 'bind', family: 'unix', address: null, port: null, path: '/run/x.sock', protocol: null, result: 'ok' },
  ]);
  assert.deepEqual(se.signalsSent, [{ targetPid: 12, targetHostPid: null, signal: 'SIGKILL', syscall: 'tgkill', result: 'ESRCH' }]);
  assert.deepEqual(se.deviceAccess, [{ path: '/dev/sda', syscall: 'openat', result: 'ENOENT' }]);
  assert.deepEqual(se.fileAccess, [
    { path: '/etc/shadow', syscall: 'openat', access: 'read', result: null },
    { path: '/root/.netrc', asWritten: '/tmp/e/.netrc', syscall: 'openat', access: 'read', result: null },
    { path: '/etc/x\n', syscall: 'mkdirat', access: 'write', result: 'EROFS' },
  ]);
  assert.deepEqual(se.privilegedSyscalls.map((p) => p.name), ['x32:mount', 'i386:syscall_21', 'ptrace']);
  assert.deepEqual(programEnd, { code: null, signal: 'SIGSYS' });
  assert.equal(se.unparsedLines, 5); // the garbled lines, and a Y line that is no refusal (the tracer sends none)
  assert.equal(decodeSockaddr(Buffer.concat([Buffer.from([10, 0, 0, 53, 0, 0, 0, 0]), Buffer.from('20010db8000000000000000000000001', 'hex')]).toString('hex'))?.address, '2001:db8::1');
  assert.equal(decodeSockaddr(Buffer.concat([Buffer.from([10, 0, 0, 53, 0, 0, 0, 0]), Buffer.from('00000000000000000000ffff7f000001', 'hex')]).toString('hex'))?.address, '::ffff:127.0.0.1');
  fc.assert(
    fc.property(fc.array(fc.oneof(fc.string(), fc.constantFrom('P', 'X', 'F', 'S', 'K', 'N', 'D', 'A', 'T', 'L', 'U', 'E', 'Q').chain((t) => fc.array(fc.oneof(fc.uint8Array({ maxLength: 40 }).map((b) => Buffer.from(b).toString('hex')), fc.integer().map(String), fc.string()), { maxLength: 6 }).map((a) => [t, ...a].join(' '))))), (ls) => {
      const r = sideEffectsFromTrace(ls, null);
      assert.ok(r.sideEffects.unparsedLines <= ls.length);
    }),
    { numRuns: 300 },
  );
});
