// An ordinary user's runs are observed by the host tracer (native/tracer.c), as root's are, not by the
// strace fallback: a path is judged where its links lead, and a syscall off the allowlist is refused
// with ENOSYS (strace can do neither: it names the path as written, and the filter has to kill the
// program with SIGSYS). Where no cgroup counts memory and processes, the tracer sets the backstops
// (RLIMIT_AS on bwrap, RLIMIT_NPROC on its init) that the node launch path set before.
// Each run is the real CLI as the host's `nobody`, which has nothing delegated on this machine.
import assert from 'node:assert/strict';
import { spawn } from 'node:child_process';
import { chownSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join } from 'node:path';
import { test } from 'node:test';
import { ptraceRefusedBecause, tracerBinaryPath } from '../../src/sandbox/observe/tracer.js';
import { airlockAsNobody } from '../helpers/cli.js';
import { repoPath } from '../helpers/paths.js';

const skip = process.getuid?.() !== 0 ? 'needs root (runs airlock as nobody)' : tracerBinaryPath() === null ? 'the host tracer is not built' : false;

interface Result {
  outputs: { stdout: { text: string }; stderr: { text: string } };
  execution: { exit_code: number | null; signal: string | null };
  side_effects: { file_access_attempts: unknown[]; refused_syscalls: unknown[]; unreadable_syscalls: unknown[] };
  verdict: { recommended_action: string; reasons: string[] };
}

const HOSTILE = `
import os, ctypes
os.symlink('/etc', '/tmp/e')
try:
    open('/tmp/e/passwd', 'a')
except OSError as e:
    print('open', e.errno)
try:
    os.utime('/dev/null')  # the host's node, bound in: the tracer made the bind read-only
except OSError as e:
    print('utime', e.errno)
print('stdin', os.readlink('/proc/self/fd/0').split(':')[0])  # not a descriptor of the host's /dev/null
print('tty', os.isatty(os.open('/dev/tty', os.O_RDWR)))  # /dev/null: a terminal's reads and writes would set the host node's times
libc = ctypes.CDLL(None, use_errno=True)
print('syscall600', libc.syscall(600), ctypes.get_errno())
print('alive')
`;

test('an ordinary user\'s run is traced by the host tracer: a write through a link is named where it leads, the host\'s /dev/null cannot be touched, and a call off the allowlist is refused with ENOSYS while the program goes on', { skip, timeout: 120_000 }, () => {
  const doc = airlockAsNobody(['doctor']);
  assert.match(doc.stdout, /\nsyscall tracer +\S+airlock-tracer \(ptrace, attached per run, as this user; side effects observed\)/, doc.stdout);

  const r = airlockAsNobody(['exec', '--json', '--', 'python3', '-c', HOSTILE]);
  assert.equal(r.code, 126, r.stderr); // BLOCK: nothing is delegated to nobody, and the attempts are findings
  const sr = JSON.parse(r.stdout) as Result;
  // EROFS, then ENOSYS: the program was not killed.
  assert.equal(sr.outputs.stdout.text, 'open 30\nutime 30\nstdin pipe\ntty False\nsyscall600 -1 38\nalive\n', sr.outputs.stderr.text);
  assert.equal(sr.execution.exit_code, 0);
  assert.deepEqual(sr.side_effects.file_access_attempts, [
    { path: '/etc/passwd', access: 'write', denied: true, as_written: '/tmp/e/passwd' },
    { path: '/dev/null', access: 'write', denied: true },
  ]);
  assert.deepEqual(sr.side_effects.refused_syscalls, [{ name: 'syscall_600', count: 1 }]);
  const reasons = sr.verdict.reasons.join('\n');
  assert.match(reasons, /writes outside \/out, \/tmp and the declared scope were attempted: \/etc\/passwd \(as \/tmp\/e\/passwd, EROFS\)/);
  assert.match(reasons, /JG_SYSCALL_REFUSED: system calls outside the sandbox's allowlist were refused: syscall_600 x1/);
});

// A program that made itself non-dumpable: its /proc/<pid>/fd is root's (0500), which it may look in
// and an ordinary user's tracer may not. The tracer takes the program's own descriptor instead
// (pidfd_getfd); another process's folder it cannot follow is reported as such, never dropped.
const NON_DUMPABLE = `
import os, ctypes, threading
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
d = os.open('/etc', os.O_PATH | os.O_DIRECTORY)
print(d, os.getpid(), flush=True)
os.symlink('/etc', '/tmp/e')
def tryopen(p):
    try:
        open(p, 'a')
    except OSError as e:
        print(e.errno, flush=True)
# '0<d>' and a closed descriptor are no names in that folder: the kernel fails them (ENOENT).
for p in (f'/proc/self/fd/{d}/passwd', f'/dev/fd/{d}/../etc/shadow', '/tmp/e/group', f'/proc/self/fd/0{d}/x', '/proc/self/fd/99/x'):
    tryopen(p)
t = threading.Thread(target=tryopen, args=(f'/proc/thread-self/fd/{d}/hosts',))
t.start()
t.join()
# An O_PATH descriptor of a file, reopened for writing: a write on that file.
tryopen(f"/proc/self/fd/{os.open('/etc/nsswitch.conf', os.O_PATH)}")
if os.uname().machine == 'x86_64':
    # A path in a write-only page, which process_vm_readv refuses and the kernel reads, given by openat(2).
    libc = ctypes.CDLL(None, use_errno=True)
    libc.mmap.restype = ctypes.c_void_p
    libc.mmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int, ctypes.c_int, ctypes.c_int, ctypes.c_long]
    a = libc.mmap(None, 4096, 3, 0x22, -1, 0)
    ctypes.memmove(a, b'/etc/motd\\0', 10)
    libc.mprotect(ctypes.c_void_p(a), 4096, 2)
    libc.syscall(257, -100, ctypes.c_void_p(a), os.O_WRONLY | os.O_CREAT, 0o644)
    print(ctypes.get_errno(), flush=True)
if os.fork() == 0:
    tryopen(f'/proc/{os.getppid()}/fd/{d}/hostname')  # the parent's folder: refused to the child too
    os._exit(0)
os.wait()
`;

test('hostile: a non-dumpable program writing through its own /proc/self/fd/N (a folder the user\'s tracer may not search) is named where it leads; what cannot be followed is reported, not dropped', { skip, timeout: 120_000 }, () => {
  const r = airlockAsNobody(['exec', '--json', '--', 'python3', '-c', NON_DUMPABLE]);
  assert.equal(r.code, 126, r.stderr);
  const sr = JSON.parse(r.stdout) as Result;
  const [first, ...errnos] = sr.outputs.stdout.text.trim().split('\n');
  const [d, pid] = first!.split(' ');
  const x64 = process.arch === 'x64';
  assert.deepEqual(errnos, ['30', '30', '30', '2', '2', '30', '30', ...(x64 ? ['30'] : []), '13'], sr.outputs.stderr.text);
  const write = (path: string, asWritten?: string) => ({ path, access: 'write', denied: true, ...(asWritten ? { as_written: asWritten } : {}) });
  assert.deepEqual(sr.side_effects.file_access_attempts, [
    write('/etc/passwd', `/proc/self/fd/${d}/passwd`),
    write('/etc/shadow', `/dev/fd/${d}/../etc/shadow`),
    write('/etc/group', '/tmp/e/group'),
    // Named as the kernel's lookup leaves them, as root's tracer names them (not as descriptor <d>'s folder).
    write(`/proc/${pid}/fd/0${d}/x`, `/proc/self/fd/0${d}/x`),
    write(`/proc/${pid}/fd/99/x`, '/proc/self/fd/99/x'),
    write('/etc/hosts', `/proc/thread-self/fd/${d}/hosts`),
    write('/etc/nsswitch.conf', `/proc/self/fd/${Number(d) + 1}`),
    // Its /proc/<pid>/mem is root's then: read with PTRACE_PEEKDATA.
    ...(x64 ? [write('/etc/motd')] : []),
  ]);
  // The child's look in its parent's folder, which the kernel refused it (EACCES) too.
  assert.deepEqual(sr.side_effects.unreadable_syscalls, [{ name: 'openat', count: 1 }]);
  assert.match(sr.verdict.reasons.join('\n'), /JG_UNREADABLE_ARGUMENT: system calls whose arguments the host could not read or follow: openat x1/);
});

// The same program changing host files through its descriptors: the tracer takes each one (its fd
// folder is root's) to name the file, in the process and in a thread of its own.
const NON_DUMPABLE_FDS = `
import os, ctypes, threading
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
def tryit(f):
    try:
        f()
    except OSError as e:
        print(e.errno, flush=True)
tryit(lambda: os.fchmod(os.open('/etc/hosts', os.O_RDONLY), 0o777))
tryit(lambda: os.utime(os.open('/etc/group', os.O_RDONLY)))
t = threading.Thread(target=tryit, args=(lambda: os.setxattr(os.open('/etc/passwd', os.O_RDONLY), 'user.x', b'1'),))
t.start()
t.join()
mine = os.open('/tmp/mine', os.O_RDWR | os.O_CREAT, 0o644)
os.fchmod(mine, 0o600)
tryit(lambda: os.fchmod(999, 0o600))
# ... and by a path relative to a descriptor of a folder
etc = os.open('/etc', os.O_RDONLY)
tryit(lambda: os.chmod('nsswitch.conf', 0o777, dir_fd=etc))
tryit(lambda: open(os.open('ld.so.conf', os.O_WRONLY, dir_fd=etc)))
`;

test('hostile: a non-dumpable program changing host files through its descriptors (fchmod, futimens, fsetxattr in a thread) or by paths relative to one is reported on each file; its own file and a closed descriptor are no finding; strace, which cannot name them, reports unobserved calls', { skip, timeout: 120_000 }, () => {
  const r = airlockAsNobody(['exec', '--json', '--', 'python3', '-c', NON_DUMPABLE_FDS]);
  assert.equal(r.code, 126, r.stderr);
  const sr = JSON.parse(r.stdout) as Result;
  assert.equal(sr.outputs.stdout.text, '30\n30\n30\n9\n30\n30\n', sr.outputs.stderr.text);
  const write = (path: string) => ({ path, access: 'write', denied: true });
  assert.deepEqual(sr.side_effects.file_access_attempts, [write('/etc/hosts'), write('/etc/group'), write('/etc/passwd'), write('/etc/nsswitch.conf'), write('/etc/ld.so.conf')]);
  assert.deepEqual(sr.side_effects.unreadable_syscalls, []);
  // strace, which cannot name these descriptors, says so: unobserved calls, not nothing.
  const st = airlockAsNobody(['exec', '--json', '--', 'python3', '-c', NON_DUMPABLE_FDS], ['AIRLOCK_SYSCALL_TRACER=strace']);
  const ss = JSON.parse(st.stdout) as Result;
  assert.equal(ss.outputs.stdout.text, '30\n30\n30\n9\n30\n30\n', ss.outputs.stderr.text);
  assert.deepEqual(ss.side_effects.file_access_attempts, []);
  assert.deepEqual(ss.side_effects.unreadable_syscalls.filter((u) => (u as { name: string }).name !== 'openat'), [{ name: 'fchmod', count: 2 }, { name: 'utimensat', count: 1 }, { name: 'fsetxattr', count: 1 }, { name: 'fchmodat', count: 1 }]);
  assert.ok(ss.side_effects.unreadable_syscalls.some((u) => (u as { name: string }).name === 'openat'), JSON.stringify(ss.side_effects.unreadable_syscalls));
  assert.match(ss.verdict.reasons.join('\n'), /JG_UNREADABLE_ARGUMENT/);
});

test('an ordinary user\'s backstops hold through the tracer: a fork spree stops at --pids (RLIMIT_NPROC on the init) and is reported as the pids limit reached, a memory hog stops at --memory (RLIMIT_AS)', { skip, timeout: 120_000 }, () => {
  const forks = airlockAsNobody(['exec', '--json', '--pids', '8', '--timeout', '30', '--', 'sh', '-c', 'for i in 1 2 3 4 5 6 7 8 9 10 11 12; do sleep 3 & done; wait']);
  assert.equal(forks.code, 126, forks.stderr);
  const fr = JSON.parse(forks.stdout) as Result;
  assert.match(fr.outputs.stderr.text, /Cannot fork/);
  // No cgroup counts its processes: the forks the kernel refused (EAGAIN) say the limit was reached.
  assert.ok(fr.verdict.reasons.includes('resource limits exceeded (pids): exited with 2'), fr.verdict.reasons.join('\n'));
  const calm = airlockAsNobody(['exec', '--json', '--pids', '8', '--', 'sh', '-c', 'for i in 1 2 3; do sleep 0.1 & done; wait']);
  assert.doesNotMatch((JSON.parse(calm.stdout) as Result).verdict.reasons.join('\n'), /limits exceeded/);

  const hog = airlockAsNobody(['exec', '--json', '--memory', '64', '--timeout', '30', '--', 'python3', '-c', 'b = []\nwhile True: b.append(bytearray(16 << 20))']);
  assert.equal(hog.code, 126, hog.stderr);
  const sr = JSON.parse(hog.stdout) as Result;
  assert.match(sr.outputs.stderr.text, /MemoryError/);
  assert.equal(sr.execution.exit_code, 1);
});

test('yama decides whether the tracer can attach: no yama, 0 or 1 allow it (the init is its descendant); 2 allows only root; 3 no one', () => {
  for (const scope of [null, '0\n', '1\n']) {
    assert.equal(ptraceRefusedBecause(false, scope), null);
    assert.equal(ptraceRefusedBecause(true, scope), null);
  }
  assert.equal(ptraceRefusedBecause(false, '2\n'), 'yama ptrace_scope is 2: only root may attach');
  assert.equal(ptraceRefusedBecause(true, '2\n'), null);
  for (const root of [false, true]) assert.equal(ptraceRefusedBecause(root, '3\n'), 'yama ptrace_scope is 3: no process may attach');
});

// A copy of the program's descriptor is the file's last reference when the program closes its own
// meanwhile: a socket set to linger on close for an hour, its send buffer full, would hold a close()
// on the tracer's loop, and every traced task of the run with it. Thread A makes the tracer copy
// descriptor 50 again and again (/proc/self/fd/50/x); the main thread closes a lingering socket there.
// Shared by the programs below: thread A (start); lingering(L), a socket connected to L, its send buffer
// full, set to linger for an hour; race(fd), which places fd at N and closes N, and returns how long
// our close took (our own close lingers when it is the last reference: cut short by the timer).
const RACE = `
import os, ctypes, socket, threading, signal, struct, time
ctypes.CDLL(None).prctl(4, 0, 0, 0, 0)
N = 50
stop = [False]
def A(touch):
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGALRM})
    while not stop[0]:
        try: touch()
        except OSError: pass
signal.signal(signal.SIGALRM, lambda *a: None)
def start(touch):  # thread A makes the tracer copy descriptor N again and again
    threading.Thread(target=A, args=(touch,), daemon=True).start()
alive = [0]
def B():  # an open stops in the tracer: B goes on as long as the tracer does
    while not stop[0]:
        os.close(os.open('/tmp/probe', os.O_RDONLY | os.O_CREAT))
        alive[0] += 1
threading.Thread(target=B, daemon=True).start()
walk = lambda: os.open(f'/proc/self/fd/{N}/x', os.O_RDONLY)  # a path through it
def lingering(L):
    c = socket.socket(); c.setsockopt(socket.SOL_SOCKET, socket.SO_SNDBUF, 4096)
    c.connect(L.getsockname())
    c.setblocking(False)
    try:
        while True: c.send(b'x' * 65536)
    except BlockingIOError: pass
    c.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack('ii', 1, 3600))
    return c
def race(fd):
    os.dup2(fd, N); os.close(fd)
    signal.setitimer(signal.ITIMER_REAL, 0.005)
    t0 = time.monotonic(); os.close(N); took = time.monotonic() - t0
    signal.setitimer(signal.ITIMER_REAL, 0)
    return took
def stalled():  # after the tracer's copy was the last reference: is the tracer stuck?
    # A stuck close lasts the hour asked; a busy machine may pause thread B a moment. (Thread A may
    # block on its own: a call it made on N can hold the last reference, and then it closes it.)
    b0 = alive[0]; t1 = time.monotonic()
    while alive[0] == b0 and time.monotonic() - t1 < 3: time.sleep(0.01)
    return alive[0] == b0
`;

const LINGER = `${RACE}
start(walk)
L = socket.socket(); L.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
L.bind(('127.0.0.1', 0)); L.listen(64)
fast = stalls = 0
for i in range(600):
    took = race(lingering(L).detach()); s, _ = L.accept()
    if took < 0.004:  # the last reference was elsewhere: the tracer's copy
        fast += 1
        if stalled():
            stalls += 1
            b0 = alive[0]; s.close()  # the peer's reset ends the lingering close
            while alive[0] == b0: time.sleep(0.001)
    s.close()
stop[0] = True
print(fast, stalls)
`;

// The lingering socket inside a unix socket: sent to itself (SCM_RIGHTS) and never received, so the
// unix socket's last close releases it. The tracer's copy of the unix socket must not be closed on
// its loop either (a review's finding: may_linger() took unix sockets for safe).
const IN_UNIX = `${RACE}
start(lambda: os.utime(N))  # a call on it (the copy the walk takes wins this race too rarely)
fast = stalls = 0
for i in range(600):
    L = socket.socket(); L.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    L.bind(('127.0.0.1', 0)); L.listen(1)
    c = lingering(L)
    u0, u1 = socket.socketpair()
    socket.send_fds(u0, [b'x'], [c.fileno()])
    c.close(); u0.close()
    if race(u1.detach()) < 0.004:
        fast += 1
        if stalled():
            stalls += 1
            b0 = alive[0]; L.close()  # the pending connection's reset ends the lingering close
            while alive[0] == b0: time.sleep(0.001)
    L.close()
stop[0] = True
print(fast, stalls)
`;

test('hostile: a lingering socket whose last reference is the tracer\'s copy of the descriptor does not stall the tracer (its release runs under a short timer, whose signal ends a lingering close)', { skip, timeout: 120_000 }, () => {
  const r = airlockAsNobody(['exec', '--json', '--timeout', '90', '--', 'python3', '-c', LINGER]);
  const sr = JSON.parse(r.stdout) as Result;
  assert.match(sr.outputs.stdout.text, /^\d+ \d+\n$/, `the program did not finish (exit ${sr.execution.exit_code}, signal ${sr.execution.signal}): ${sr.outputs.stderr.text}`);
  const [fast, stalls] = sr.outputs.stdout.text.trim().split(' ').map(Number);
  // `fast`: how often the tracer's copy was the last reference (the race won; about 1 in 100 here).
  assert.ok(fast! > 0, 'the race was never won: nothing was tested');
  assert.equal(stalls, 0, `the traced thread stalled ${stalls} times in ${fast} closes that left the last reference to the tracer`);
});

test('hostile: a lingering socket held in flight by a unix socket whose last reference is the tracer\'s copy does not stall the tracer either', { skip, timeout: 120_000 }, () => {
  const r = airlockAsNobody(['exec', '--json', '--timeout', '90', '--', 'python3', '-c', IN_UNIX]);
  const sr = JSON.parse(r.stdout) as Result;
  assert.match(sr.outputs.stdout.text, /^\d+ \d+\n$/, `the program did not finish (exit ${sr.execution.exit_code}, signal ${sr.execution.signal}): ${sr.outputs.stderr.text}`);
  const [fast, stalls] = sr.outputs.stdout.text.trim().split(' ').map(Number);
  assert.ok(fast! > 0, `the race was never won: nothing was tested (${sr.outputs.stdout.text} ${sr.outputs.stderr.text})`);
  assert.equal(stalls, 0, `the traced thread stalled ${stalls} times in ${fast} closes that left the last reference to the tracer`);
});

// The same race, won once, against a peer that never reads: a connection its listener never
// accepted, the listener held open by the tracer's own copy of it, taken next. Releasing the socket's
// copy must neither wait an hour nor hold up what the tracer copies after it, here that listener and
// the run's stdout (a FIFO the program reaches by /proc/self/fd/1/x): kept open, it would hold the run
// past its end (an earlier closer thread, stuck in that close(), held every later copy).
const STUCK = `${RACE}
start(walk)
won = -1
for i in range(3000):
    L = socket.socket(); L.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    L.bind(('127.0.0.1', 0)); L.listen(1)
    if race(lingering(L).detach()) < 0.004:  # never accepted: nothing reads what it was sent
        won = i
        stop[0] = True
        for p in (f'/proc/self/fd/{L.fileno()}/x', '/proc/self/fd/1/x', '/proc/self/fd/2/x'):
            try: os.open(p, os.O_RDONLY)
            except OSError: pass
        break
    L.close()
stop[0] = True
print('won', won, flush=True)
`;

test('hostile: the tracer\'s copy of a socket left lingering with a peer that never reads neither stalls the tracer nor holds the run\'s stdout open: the run ends at once', { skip, timeout: 180_000 }, () => {
  const t0 = Date.now();
  const r = airlockAsNobody(['exec', '--json', '--timeout', '60', '--', 'python3', '-c', STUCK]);
  const took = Date.now() - t0;
  assert.notEqual(r.code, null, `airlock exec did not end within 120 s: ${r.stderr}`);
  const sr = JSON.parse(r.stdout) as Result;
  assert.match(sr.outputs.stdout.text, /^won \d+\n$/, `the race was not won (the tracer's copy was never the last reference): ${sr.outputs.stdout.text}`);
  assert.equal(sr.execution.signal, null);
  assert.ok(took < 30_000, `the run took ${took} ms (its limit was 60 s): something held it`);
});

// An ordinary user's sandboxes run as that user, and so do its stdout and stderr FIFOs, which the
// program can chmod through its own descriptors (`os.fchmod(1, 0o666)`): no other user may reach them.
test('an ordinary user\'s staging (the run\'s folder, its stdout and stderr FIFOs) is reachable by that user only (0700)', { skip, timeout: 60_000 }, async () => {
  const home = mkdtempSync(join(tmpdir(), 'airlock-nobody-'));
  chownSync(home, 65534, 65534);
  try {
    const env = [`PATH=${[dirname(process.execPath), '/usr/bin', '/bin'].join(':')}`, `HOME=${home}`, `TMPDIR=${home}`];
    const child = spawn('runuser', ['-u', 'nobody', '--', 'env', '-i', ...env, repoPath('bin/airlock'), 'exec', '--json', '--', 'python3', '-c', 'import os, time\nos.fchmod(1, 0o666)\ntime.sleep(3)'], { cwd: home, stdio: 'ignore' });
    const ended = new Promise((resolve) => child.on('exit', resolve));
    let modes: string[] = [];
    for (let i = 0; i < 250 && modes.length < 2; i++) {
      await new Promise((r) => setTimeout(r, 10));
      const base = readdirSync(home).find((n) => n.startsWith('airlock-ns-'));
      const run = base ? readdirSync(join(home, base)).find((n) => n.startsWith('ns-')) : undefined;
      if (base && run) modes = [join(home, base), join(home, base, run)].map((d) => (statSync(d).mode & 0o777).toString(8));
    }
    await ended;
    assert.deepEqual(modes, ['700', '700']);
  } finally {
    rmSync(home, { recursive: true, force: true });
  }
});
