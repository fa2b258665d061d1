// Real-kernel tests of the seccomp filter: bwrap --seccomp with our program, then a static C probe.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, writeFileSync, openSync, closeSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { ALLOWED_SYSCALLS, allowedSyscallNumbers, buildSeccompFilter, deniedSyscallNumbers, DENIED_SYSCALLS, MONTY_WORKER_PROFILE } from '../../src/sandbox/ns/seccomp.js';
import { AARCH64_SYSCALLS, X86_64_SYSCALLS } from '../../src/sandbox/ns/syscall-numbers.js';

const dir = mkdtempSync(join(tmpdir(), 'airlock-seccomp-'));
const PROBE_C = String.raw`
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <unistd.h>
#include <sys/syscall.h>
#include <sched.h>
#include <errno.h>
#include <pthread.h>
#include <sys/wait.h>
static volatile int got = 0, gotnr = -1;
static void h(int s, siginfo_t *si, void *u) { (void)s; (void)u; got = 1; gotnr = si->si_syscall; }
static void *thr(void *a) { return a; }
int main(int argc, char **argv) {
  struct sigaction sa; memset(&sa, 0, sizeof sa); sa.sa_sigaction = h; sa.sa_flags = SA_SIGINFO; sigaction(SIGSYS, &sa, 0);
  if (argc < 2) return 2;
  if (!strcmp(argv[1], "ok")) {
    pthread_t t; if (pthread_create(&t, 0, thr, 0)) return 10; pthread_join(t, 0);
    pid_t p = fork(); if (p == 0) { execl("/bin/true", "true", (char*)0); _exit(9); }
    int st; waitpid(p, &st, 0); if (!WIFEXITED(st) || WEXITSTATUS(st)) return 11;
    return got ? 12 : 0;
  }
  if (!strcmp(argv[1], "clone3")) { long r = syscall(435, 0, 0); return (r == -1 && errno == ENOSYS && !got) ? 0 : 1; }
  if (!strcmp(argv[1], "x32")) { syscall(0x40000000 | 39); return got ? 0 : 1; }
  if (!strcmp(argv[1], "i386")) { long r; __asm__ volatile("int $0x80" : "=a"(r) : "a"(20) : "memory"); return got ? 0 : 1; }
  long nr = strtol(argv[1], 0, 0), a0 = argc > 2 ? strtol(argv[2], 0, 0) : 0, a1 = argc > 3 ? strtol(argv[3], 0, 0) : 0;
  long r = syscall(nr, a0, a1, 0, 0, 0, 0);
  /* exit 0: trapped with the right number; 3: not trapped */
  printf("nr=%ld r=%ld errno=%d trapped=%d\n", nr, r, errno, got);
  return got && gotnr == nr ? 0 : 3;
}
`;
const onX64 = process.arch === 'x64';
let probe = '';
const filterFile = join(dir, 'filter.bpf');

function sandbox(argv: string[], filter = filterFile): { status: number | null; out: string } {
  const fd = openSync(filter, 'r');
  try {
    const r = spawnSync('bwrap', ['--unshare-all', '--die-with-parent', '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--seccomp', '3', '--', ...argv],
      { stdio: ['ignore', 'pipe', 'pipe', fd], encoding: 'utf8', timeout: 20000 });
    return { status: r.status, out: r.stdout + r.stderr };
  } finally {
    closeSync(fd);
  }
}

test('setup: compile the probe and write the filter', { skip: !onX64 }, () => {
  writeFileSync(join(dir, 'probe.c'), PROBE_C);
  probe = join(dir, 'probe');
  const r = spawnSync('gcc', ['-O1', '-static', '-pthread', '-o', probe, join(dir, 'probe.c')], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  writeFileSync(filterFile, buildSeccompFilter('x64'));
});

test('the program is a whole number of sock_filter records and ends with a return', () => {
  for (const arch of ['x64', 'arm64']) {
    const b = buildSeccompFilter(arch);
    assert.equal(b.length % 8, 0);
    assert.ok(b.length / 8 < 4096);
    assert.equal(b.readUInt16LE(b.length - 8), 0x06);
  }
  assert.throws(() => buildSeccompFilter('riscv64'), /unsupported architecture/);
  assert.throws(() => buildSeccompFilter('ia32'), /unsupported architecture/);
});

test('normal programs work under the filter', { skip: !onX64 }, () => {
  assert.equal(sandbox([probe, 'ok']).status, 0, 'threads, fork and exec');
  assert.equal(sandbox(['/bin/true']).status, 0);
  const sh = sandbox(['/bin/sh', '-c', 'x=$(echo hi); [ "$x" = hi ] && /bin/true && echo done']);
  assert.equal(sh.status, 0);
  assert.match(sh.out, /done/);
  const node = sandbox([process.execPath, '-e', 'require("node:child_process").execFileSync("/bin/true"); console.log(6*7)']);
  assert.equal(node.status, 0, node.out);
  assert.match(node.out, /42/);
  const py = spawnSync('python3', ['-c', 'import sys; print(sys.executable)'], { encoding: 'utf8' });
  if (py.status === 0) {
    const r = sandbox([py.stdout.trim(), '-c', 'import threading,subprocess; t=threading.Thread(target=print); t.start(); t.join(); subprocess.run(["/bin/true"], check=True); print(1)']);
    assert.equal(r.status, 0, r.out);
  }
});

test('the allowlist is enough for git, a C compiler, make, tar and gzip (anything off it would be trapped here)', { skip: !onX64 }, () => {
  const work = mkdtempSync(join(tmpdir(), 'airlock-seccomp-work-'));
  writeFileSync(join(work, 'a.c'), 'int main(void) { return 0; }\n');
  writeFileSync(join(work, 'Makefile'), 'a: a.c\n\tcc -O1 -o a a.c\n');
  const script = [
    'cd "$1"', 'make -s', './a',
    'git init -q .', 'git add a.c Makefile', 'git -c user.email=a@b -c user.name=a commit -qm x', 'git log --oneline >/dev/null',
    'tar czf t.tgz a.c Makefile', 'mkdir x', 'tar xzf t.tgz -C x', 'gzip -c a.c | gunzip -c >/dev/null', 'echo ok',
  ].join(' && ');
  const fd = openSync(filterFile, 'r');
  try {
    const r = spawnSync('bwrap', ['--unshare-all', '--die-with-parent', '--ro-bind', '/', '/', '--dev', '/dev', '--proc', '/proc', '--tmpfs', '/tmp', '--bind', work, work, '--seccomp', '3', '--', '/bin/sh', '-c', script, 'sh', work],
      { stdio: ['ignore', 'pipe', 'pipe', fd], encoding: 'utf8', timeout: 60000 });
    assert.equal(r.status, 0, r.stdout + r.stderr);
    assert.match(r.stdout, /ok/);
  } finally {
    closeSync(fd);
  }
});

test('a syscall off the allowlist is refused (trapped without the host tracer, which answers ENOSYS: test/sandbox/blinding.test.ts)', { skip: !onX64 }, () => {
  // 100000: above any number the kernel knows; 468 file_getattr and 470: newer than the list.
  for (const nr of ['100000', '468', '470']) assert.equal(sandbox([probe, nr]).status, 0, `${nr} was not trapped`);
  // memfd_secret and the mount API's newer calls are privileged: trapped by name.
  for (const name of ['memfd_secret', 'statmount', 'listmount', 'open_tree_attr']) assert.ok(name in deniedSyscallNumbers('x64'), name);
});

test('every allowed name is a syscall of x86_64 or aarch64 (a typo would silently allow nothing)', () => {
  for (const name of Object.values(ALLOWED_SYSCALLS).flat()) assert.ok(name in X86_64_SYSCALLS || name in AARCH64_SYSCALLS, name);
  const allowed = allowedSyscallNumbers('x64');
  for (const name of Object.keys(deniedSyscallNumbers('x64'))) assert.ok(!(name in allowed), `${name} is both allowed and denied`);
});

test('the Monty worker profile is a strict subset of the allowlist, without sockets, fork or IPC; under it fork and socket are trapped', { skip: !onX64 }, () => {
  const all = new Set<string>(Object.values(ALLOWED_SYSCALLS).flat());
  for (const name of MONTY_WORKER_PROFILE.allowed) assert.ok(all.has(name), `${name} is not on the ns allowlist`);
  for (const name of ['socket', 'connect', 'bind', 'fork', 'vfork', 'execveat', 'shmget', 'msgget', 'chown', 'symlink', 'link', 'mknod', 'setuid', 'memfd_create', 'ptrace', 'mount']) {
    assert.ok(!(MONTY_WORKER_PROFILE.allowed as readonly string[]).includes(name), name);
  }
  const workerFilter = join(dir, 'worker.bpf');
  writeFileSync(workerFilter, buildSeccompFilter('x64', { profile: 'monty-worker' }));
  // The probe exits 0 when the call was trapped with its own number.
  for (const name of ['socket', 'fork', 'shmget', 'chown', 'symlink']) assert.equal(sandbox([probe, String(X86_64_SYSCALLS[name])], workerFilter).status, 0, name);
  // clone for a new process (SIGCHLD, no CLONE_THREAD) is trapped; the probe's "ok" (a thread, then fork + exec) dies by it.
  assert.equal(sandbox([probe, String(X86_64_SYSCALLS.clone), '17'], workerFilter).status, 0, 'clone(SIGCHLD)');
  assert.notEqual(sandbox([probe, 'ok'], workerFilter).status, 0);
});

test('every plainly denied syscall is trapped with SIGSYS (not executed)', { skip: !onX64 }, () => {
  const nrs = deniedSyscallNumbers('x64');
  for (const [name, nr] of Object.entries(nrs)) {
    const r = sandbox([probe, String(nr)]);
    assert.equal(r.status, 0, `${name} (${nr}) was not trapped: ${r.out}`);
  }
});

test('argument-checked rules: clone NEW flags, ioctl TIOCSTI/TIOCLINUX, personality, socket domains', { skip: !onX64 }, () => {
  assert.equal(sandbox([probe, '56', String(0x10000000 | 17)]).status, 0, 'clone(CLONE_NEWUSER)');
  assert.equal(sandbox([probe, '56', String(0x40000000 | 17)]).status, 0, 'clone(CLONE_NEWNET)');
  // A child made with CLONE_UNTRACED would escape the host tracer: trapped like a namespace flag.
  assert.equal(sandbox([probe, '56', String(0x00800000 | 17)]).status, 0, 'clone(CLONE_UNTRACED)');
  assert.equal(sandbox([probe, '16', '0', '0x5412']).status, 0, 'TIOCSTI');
  assert.equal(sandbox([probe, '16', '0', '0x541c']).status, 0, 'TIOCLINUX');
  assert.equal(sandbox([probe, '16', '0', '0x100005412']).status, 0, 'TIOCSTI with high bits set');
  assert.equal(sandbox([probe, '16', '0', '0x5401']).status, 3, 'TCGETS is allowed');
  assert.equal(sandbox([probe, '135', '0x0040000']).status, 0, 'personality(ADDR_NO_RANDOMIZE)');
  assert.equal(sandbox([probe, '135', '0xffffffff']).status, 3, 'personality query is allowed');
  assert.equal(sandbox([probe, '39']).status, 3, 'getpid is allowed');
  // socket(): only the families a network namespace confines (AF_VSOCK would reach the VM's host).
  assert.equal(sandbox([probe, '41', '40', '1']).status, 0, 'socket(AF_VSOCK)');
  assert.equal(sandbox([probe, '41', String(0x100000000 + 40), '1']).status, 0, 'socket(AF_VSOCK) with high bits set');
  assert.equal(sandbox([probe, '41', '38', '5']).status, 0, 'socket(AF_ALG)');
  for (const domain of ['1', '2', '10', '16']) assert.equal(sandbox([probe, '41', domain, '2']).status, 3, `socket(${domain}) is allowed`);
});

test('ABI bypasses are trapped; clone3 gets ENOSYS', { skip: !onX64 }, (t) => {
  assert.equal(sandbox([probe, 'x32']).status, 0, 'x32 syscall');
  // A kernel without IA32 emulation (CONFIG_IA32_EMULATION off, or ia32_emulation=0) kills `int 0x80`
  // with SIGSEGV before any filter sees it: the bypass cannot run there, and that is what we check.
  const hostI386 = spawnSync(probe, ['i386']);
  if (hostI386.signal === 'SIGSEGV') {
    t.diagnostic('this kernel has no i386 syscall entry: int 0x80 faults (SIGSEGV) even outside the sandbox');
    assert.equal(sandbox([probe, 'i386']).status, 128 + 11, 'int 0x80 faults in the sandbox too (never executed)');
  } else assert.equal(sandbox([probe, 'i386']).status, 0, 'int 0x80 is trapped');
  assert.equal(sandbox([probe, 'clone3']).status, 0, 'clone3 -> ENOSYS');
});

test('the observing filter without a tracer attached: observed syscalls fail (ENOSYS), nothing runs unobserved', { skip: !onX64 }, () => {
  const observing = join(dir, 'observe.bpf');
  writeFileSync(observing, buildSeccompFilter('x64', { observe: true }));
  const r = sandbox(['/bin/true'], observing);
  assert.notEqual(r.status, 0, r.out);
  assert.match(r.out, /Function not implemented/, 'bwrap could not exec the program');
});

test('DENIED_SYSCALLS lists every numbered rule', () => {
  const listed = new Set<string>(Object.values(DENIED_SYSCALLS).flat());
  const obsolete = new Set(['uselib', 'create_module', 'get_kernel_syms', 'query_module', 'nfsservctl', '_sysctl']);
  for (const name of Object.keys(deniedSyscallNumbers('x64'))) if (!obsolete.has(name)) assert.ok(listed.has(name), name);
});

test('the table\'s numbers for the *xattrat calls (Linux 6.13) are the running kernel\'s: listxattrat lists, removexattrat removes', { skip: process.arch !== 'x64' && process.arch !== 'arm64' }, () => {
  const file = join(dir, 'xattrat');
  writeFileSync(file, '');
  const nr = process.arch === 'x64' ? X86_64_SYSCALLS : AARCH64_SYSCALLS;
  const code = [
    'import ctypes, os, sys',
    'libc = ctypes.CDLL(None, use_errno=True); libc.syscall.restype = ctypes.c_long',
    'p = sys.argv[1].encode(); os.setxattr(p, "user.a", b"1")',
    'buf = ctypes.create_string_buffer(64)',
    'n = libc.syscall(ctypes.c_long(int(sys.argv[2])), ctypes.c_long(-100), p, 0, buf, ctypes.c_long(64))',
    'if n < 0 and ctypes.get_errno() == 38: print("ENOSYS"); sys.exit()',
    'print(buf.raw[:n])',
    'libc.syscall(ctypes.c_long(int(sys.argv[3])), ctypes.c_long(-100), p, 0, b"user.a")',
    'print(os.listxattr(p))',
  ].join('\n');
  const r = spawnSync('python3', ['-c', code, file, String(nr.listxattrat), String(nr.removexattrat)], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  if (r.stdout === 'ENOSYS\n') return; // a kernel before 6.13: nothing to compare with
  assert.equal(r.stdout, "b'user.a\\x00'\n[]\n");
});
