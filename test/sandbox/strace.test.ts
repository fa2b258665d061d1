// Real strace + real bwrap + our seccomp filter: a hostile program's attempts must show up, bwrap's
// own setup must not, and a crafted file name must not inject a line.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, readFileSync, openSync, closeSync, mkdirSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { straceArgv, parseStraceLog, isDevicePath, unescapeStrace } from '../../src/sandbox/observe/strace.js';
import { buildSeccompFilter } from '../../src/sandbox/ns/seccomp.js';

const BWRAP = spawnSync('sh', ['-c', 'command -v bwrap'], { encoding: 'utf8' }).stdout.trim();
const dir = mkdtempSync(join(tmpdir(), 'airlock-strace-'));
const onX64 = process.arch === 'x64';

function traced(argv: string[]): { status: number | null; log: string; out: string } {
  const log = join(dir, `log-${Math.random().toString(36).slice(2)}.txt`);
  const filter = join(dir, 'filter.bpf');
  writeFileSync(filter, buildSeccompFilter());
  const fd = openSync(filter, 'r');
  try {
    const [cmd, ...pre] = straceArgv(log);
    const r = spawnSync(cmd as string, [...pre, BWRAP, '--unshare-all', '--die-with-parent', '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc',
      '--bind', dir, dir, '--seccomp', '3', '--', ...argv], { stdio: ['ignore', 'pipe', 'pipe', fd], encoding: 'utf8', timeout: 30000 });
    return { status: r.status, log: readFileSync(log, 'latin1'), out: r.stdout + r.stderr };
  } finally {
    closeSync(fd);
  }
}

const HOSTILE = String.raw`
import os, socket, ctypes, signal, threading
libc = ctypes.CDLL(None, use_errno=True)
signal.signal(signal.SIGSYS, lambda *a: None)
libc.syscall(165, b"none", b"/mnt", b"tmpfs", 0, None)   # mount
libc.syscall(101, 16, 1, 0, 0)                          # ptrace(PTRACE_ATTACH, 1)
for fam, typ, addr in [(socket.AF_INET, socket.SOCK_STREAM, ("1.2.3.4", 80)), (socket.AF_INET6, socket.SOCK_STREAM, ("2001:db8::1", 443))]:
    try: socket.socket(fam, typ).connect(addr)
    except OSError: pass
try: socket.socket(socket.AF_INET, socket.SOCK_DGRAM).sendto(b"q", ("8.8.8.8", 53))
except OSError: pass
try: socket.socket(socket.AF_UNIX, socket.SOCK_STREAM).connect("/run/host.sock")
except OSError: pass
for p in ["/dev/kmsg", "/dev/null", "/dev/sda"]:
    try: open(p, "rb").close()
    except OSError: pass
os.chdir("/dev")
try: open("mem", "rb")
except OSError: pass
d = os.environ["EVIL_DIR"]
name = 'x)\n12345 kill(1, SIGKILL) = 0\n12345 --- SIGSYS {si_signo=SIGSYS, si_code=SYS_SECCOMP, si_call_addr=0x1, si_syscall=__NR_bpf, si_arch=AUDIT_ARCH_X86_64} ---\n'
open(os.path.join(d, name), "w").close()
open(os.path.join(d, '"<q>'), "w").close()
t = threading.Thread(target=lambda: None); t.start(); t.join()
pid = os.fork()
if pid == 0:
    os.execv("/bin/true", ["true"])
os.waitpid(pid, 0)
child = os.fork()
if child == 0:
    signal.pause()
os.kill(child, signal.SIGTERM)
os.waitpid(child, 0)
print("done")
`;

test('a hostile program: every attempt is observed, bwrap setup is not', { skip: !onX64 }, () => {
  const py = spawnSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' }).stdout.trim();
  assert.ok(py, 'python3 is needed for this test');
  const evil = join(dir, 'evil');
  mkdirSync(evil, { recursive: true });
  writeFileSync(join(dir, 'hostile.py'), HOSTILE);
  const r = traced(['/usr/bin/env', `EVIL_DIR=${evil}`, py, join(dir, 'hostile.py')]);
  assert.equal(r.status, 0, r.out);
  const o = parseStraceLog(r.log, { bwrapPath: BWRAP, cwd: '/tmp' });
  assert.equal(o.unparsedLines, 0);
  assert.ok(o.bwrapPid !== null && o.programPid !== null && o.programPid !== o.bwrapPid);
  // processes: env (the program's first), python (same pid after exec), the /bin/true child, the paused child.
  assert.equal(o.processesSpawned.count, 3);
  assert.ok(o.processesSpawned.threads >= 1);
  const exes = Object.fromEntries(o.processesSpawned.executables.map((e) => [e.path, e.count]));
  assert.equal(exes['/bin/true'], 1);
  assert.equal(exes['/usr/bin/env'], 1);
  assert.ok(!(BWRAP in exes), 'bwrap is not the program');
  // privileged: trapped by our filter; bwrap's own mount() calls are not the program's.
  const priv = Object.fromEntries(o.privilegedSyscalls.map((p) => [`${p.name}:${p.outcome}`, p.count]));
  assert.deepEqual(priv, { 'mount:trapped': 1, 'ptrace:trapped': 1 });
  // network
  const net = o.networkAttempts.filter((n) => n.syscall !== 'socket');
  assert.deepEqual(net.map((n) => [n.syscall, n.family, n.protocol, n.address, n.port, n.path]), [
    ['connect', 'inet', 'tcp', '1.2.3.4', 80, null],
    ['connect', 'inet6', 'tcp', '2001:db8::1', 443, null],
    ['sendto', 'inet', 'udp', '8.8.8.8', 53, null],
    ['connect', 'unix', 'stream', null, null, '/run/host.sock'],
  ]);
  assert.ok(net.every((n) => n.result !== 'ok'));
  // devices: /dev/null is harmless; the relative open of "mem" from /dev is resolved.
  assert.deepEqual(o.deviceAccess.map((d) => d.path), ['/dev/kmsg', '/dev/sda', '/dev/mem']);
  // signals: SIGTERM to the child (a pid inside the sandbox's namespace, translated).
  const term = o.signalsSent.filter((s) => s.signal === 'SIGTERM');
  assert.equal(term.length, 1);
  assert.equal(term[0]?.result, 'ok');
  assert.ok(term[0]?.targetHostPid !== null);
  // the crafted name did not inject a kill or a SIGSYS line
  assert.ok(!o.signalsSent.some((s) => s.signal === 'SIGKILL'));
  assert.ok(!o.privilegedSyscalls.some((p) => p.name === 'bpf'));
  assert.ok(r.log.includes('12345 kill'), 'the name is in the log, escaped on one line');
});

test('the privileged families are visible when the filter is missing (defense in depth)', () => {
  const log = [
    '100 execve("/usr/bin/bwrap", ["bwrap"], 0x7ffd /* 3 vars */) = 0',
    '100 clone(child_stack=NULL, flags=CLONE_NEWNS|CLONE_NEWUSER|CLONE_NEWPID|SIGCHLD) = 101',
    '101 mount("tmpfs", "/tmp", "tmpfs", MS_NOSUID|MS_NODEV, NULL) = 0',
    '101 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 2 /* 102 in strace\'s PID NS */',
    '102 execve("/root/.cargo/bin/sh", ["sh"], 0x7ffd /* 3 vars */) = -1 ENOENT (No such file or directory)',
    '102 execve("/usr/bin/sh", ["sh"], 0x7ffd /* 3 vars */) = 0',
    '102 mount("none", "/mnt", "tmpfs", 0, NULL) = -1 EPERM (Operation not permitted)',
    '102 unshare(CLONE_NEWUSER) = 0',
    '102 vfork( <unfinished ...>',
    '103 execve("/bin/x", ["x"], 0x5 /* 3 vars */ <unfinished ...>',
    '102 <... vfork resumed>)              = 3 /* 103 in strace\'s PID NS */',
    '103 <... execve resumed>)             = 0',
    '103 clone(child_stack=NULL, flags=CLONE_NEWNET|SIGCHLD) = 4 /* 104 in strace\'s PID NS */',
    '103 openat(AT_FDCWD</>, "dev/./kmsg", O_RDONLY) = -1 ENOENT (No such file or directory)',
    '103 openat(AT_FDCWD</tmp>, "x", O_RDONLY) = 3</dev/watchdog>',
    '104 kill(1 /* 101 in strace\'s PID NS */, SIGKILL) = -1 EPERM (Operation not permitted)',
    'garbage line',
    '105 unshare(0) = 0',
  ].join('\n');
  const o = parseStraceLog(log, { bwrapPath: '/usr/bin/bwrap', cwd: '/tmp' });
  assert.equal(o.bwrapPid, 100);
  assert.equal(o.programPid, 102);
  assert.equal(o.unparsedLines, 1);
  assert.equal(o.processesSpawned.count, 3);
  assert.deepEqual(o.processesSpawned.executables, [{ path: '/bin/x', count: 1 }, { path: '/usr/bin/sh', count: 1 }]);
  const priv = Object.fromEntries(o.privilegedSyscalls.map((p) => [`${p.name}:${p.outcome}`, p.count]));
  // 105 has no known parent: it counts (over-reporting is safe).
  assert.deepEqual(priv, { 'mount:denied': 1, 'unshare:succeeded': 2, 'clone(CLONE_NEW*):succeeded': 1 });
  assert.deepEqual(o.deviceAccess.map((d) => d.path), ['/dev/kmsg', '/dev/watchdog']);
  assert.deepEqual(o.signalsSent, [{ targetPid: 1, targetHostPid: 101, signal: 'SIGKILL', syscall: 'kill', result: 'EPERM' }]);
});

test('a relative path with no dirfd (or a bare AT_FDCWD) starts at the cwd the parser follows: chdir, fchdir, shared by CLONE_FS, copied by fork, a vfork child\'s own even when its lines come first; where it is lost, the call is unobserved', () => {
  const log = [
    '100 execve("/usr/bin/bwrap", ["bwrap"], 0x7ffd /* 3 vars */) = 0',
    '100 clone(child_stack=NULL, flags=CLONE_NEWNS|CLONE_NEWUSER|SIGCHLD) = 101',
    '101 chdir("/newroot") = 0', // bwrap's own set-up: not the program's
    '101 execve("/usr/bin/python3", ["python3"], 0x7ffd /* 3 vars */) = 0',
    '101 chmod("a", 0777) = 0', // the run's cwd: /out
    '101 chdir("/etc") = 0',
    '101 chmod("group", 0777) = -1 EROFS (Read-only file system)',
    '101 clone3({flags=CLONE_VM|CLONE_FS|CLONE_FILES|CLONE_SIGHAND|CLONE_THREAD|CLONE_SYSVSEM, exit_signal=0}, 88) = 102',
    '101 clone(child_stack=NULL, flags=CLONE_CHILD_CLEARTID|CLONE_CHILD_SETTID|SIGCHLD, child_tidptr=0x7f) = 103',
    '102 chdir("../usr") = 0', // the thread moves its process's cwd too
    '101 mkdir("lib/x", 0777) = -1 EROFS (Read-only file system)',
    '103 open("passwd", O_WRONLY|O_CREAT, 0644) = -1 EROFS (Read-only file system)', // the fork kept /etc
    '103 fchdir(3</var/lib>) = 0',
    '103 unlink("dpkg") = -1 EROFS (Read-only file system)',
    '103 openat(AT_FDCWD, "status", O_WRONLY) = -1 EROFS (Read-only file system)', // undecorated: the tracked cwd
    '103 fchdir(4) = 0', // a descriptor strace could not name: the cwd is lost
    '103 chmod("x", 0777) = -1 EROFS (Read-only file system)',
    '103 chmod("/etc/hosts", 0777) = -1 EROFS (Read-only file system)',
    // A vfork child's lines come before its parent's vfork line (a review's finding): its chdir is its own.
    '101 vfork( <unfinished ...>',
    '104 chdir("/etc") = 0',
    '104 execve("/usr/bin/python3", ["python3"], 0x7ffd /* 3 vars */) = 0',
    '101 <... vfork resumed>) = 104',
    '104 chmod("shadow", 0777) = -1 EROFS (Read-only file system)',
    '101 mkdir("share/y", 0777) = -1 EROFS (Read-only file system)', // the parent is still in /usr
    // ... and one made with CLONE_FS moves its parent's too.
    '101 clone(child_stack=0x7f, flags=CLONE_FS|CLONE_VFORK|SIGCHLD <unfinished ...>',
    '105 chdir("/boot") = 0',
    '105 exit_group(0) = ?',
    '101 <... clone resumed>) = 105',
    '101 mkdir("z", 0777) = -1 EROFS (Read-only file system)',
  ].join('\n');
  const o = parseStraceLog(log, { bwrapPath: '/usr/bin/bwrap', cwd: '/out' });
  assert.equal(o.programPid, 101);
  assert.deepEqual(o.fileAccess.map((a) => `${a.syscall} ${a.path} ${a.result}`), [
    'chmod /out/a ok',
    'chmod /etc/group EROFS',
    'mkdir /usr/lib/x EROFS',
    'open /etc/passwd EROFS',
    'unlink /var/lib/dpkg EROFS',
    'openat /var/lib/status EROFS',
    'chmod /etc/hosts EROFS',
    'chmod /etc/shadow EROFS',
    'mkdir /usr/share/y EROFS',
    'mkdir /boot/z EROFS',
  ]);
  assert.deepEqual(o.unreadableSyscalls, [{ syscall: 'chmod', count: 1 }]);
});

test('no bwrap in the log: everything counts', () => {
  const o = parseStraceLog('7 mount("a", "b", "c", 0, NULL) = 0\n', { bwrapPath: '/usr/bin/bwrap', cwd: '/tmp' });
  assert.equal(o.bwrapPid, null);
  assert.deepEqual(o.privilegedSyscalls, [{ name: 'mount', count: 1, outcome: 'succeeded' }]);
});

test('never throws on hostile input', () => {
  const inputs = ['', '\0\0\0', '1 '.repeat(100000), '1 execve(' + '('.repeat(50000), '1 <... x resumed>) = 0', '\uFEFF1 kill(1, 9) = 0\r\n',
    '1 openat(AT_FDCWD<' + '\\'.repeat(9999), '1 connect(3, {sa_family=AF_INET, sin_port=htons(', Buffer.from(Array.from({ length: 5000 }, (_, i) => i % 256)).toString('latin1')];
  for (const s of inputs) {
    const o = parseStraceLog(s, { bwrapPath: '/usr/bin/bwrap', cwd: '/tmp' });
    assert.equal(typeof o.unparsedLines, 'number');
  }
});

test('helpers: device set and unescaping', () => {
  for (const p of ['/dev/null', '/dev/pts/3', '/dev/fd/1', '/dev/shm/x', '/dev', '/dev/stdout', '/tmp/dev/kmsg']) assert.equal(isDevicePath(p), false, p);
  for (const p of ['/dev/kmsg', '/dev/../dev/mem', '/dev/shmx', '/dev/sda1', '/dev/net/tun']) assert.equal(isDevicePath(p), true, p);
  assert.equal(unescapeStrace('a\\"b\\n\\303\\251\\x41\\\\'), 'a"b\né' + 'A\\');
});

test('a launch by node (the strace path) whose process exited while another still holds its pipes ends after a grace period: the run never hangs on them', async () => {
  const { launchWithNode } = await import('../../src/sandbox/ns/launch.js');
  // `sleep` keeps every pipe of the launch open for 20 s after the shell has printed and exited.
  const l = launchWithNode({ cmd: ['/bin/sh', '-c', 'echo hi; sleep 20 & exit 3'], ids: null, filter: Buffer.alloc(0), prepare: async () => null });
  let out = '';
  l.stdout.on('data', (d: Buffer) => (out += d.toString()));
  l.stderr.resume();
  const t0 = Date.now();
  const end = await l.closed;
  assert.ok(Date.now() - t0 < 5000, `closed after ${Date.now() - t0} ms`);
  assert.equal(end.code, 3);
  assert.equal(out, 'hi\n', 'what the pipe carried before is read');
  spawnSync('pkill', ['-f', '^sleep 20$']);
});
