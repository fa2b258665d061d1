// Issue #16, points 1 and 2, by attack: programs that try to act where the host cannot see them (memory
// the tracer cannot read, syscalls the filter does not know, code with no file behind it). Each one
// fails, and the result names the attempt. Real bwrap, real tracer, real programs.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, mkdtempSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { basename, join } from 'node:path';
import { actionFromToolRequest } from '../../src/action/from-tool-request.js';
import { checkText } from '../../src/contracts/index.js';
import type { SandboxResult } from '../../src/contracts/sandbox-result.js';
import type { ToolRequest } from '../../src/contracts/tool-request.js';
import { runAction } from '../../src/pipeline/run.js';
import { launchWithTracer } from '../../src/sandbox/ns/launch.js';
import { buildSeccompFilter } from '../../src/sandbox/ns/seccomp.js';
import { sideEffectsFromTrace } from '../../src/sandbox/observe/trace-events.js';
import { syscallTracer } from '../../src/sandbox/observe/tracer.js';
import { openWorkspace } from '../../src/workspace/workspace.js';
import { writeRequest } from '../helpers/requests.js';
import { py, pyUnderStrace, text } from './helpers-ns.js';

const tracer = syscallTracer();
const skip = tracer === null ? 'no host tracer here (not root or native/tracer.c not built)' : false;

/** Runs a python script as an approved Tool Request through the whole pipeline; its Sandbox Result. */
async function judged(slug: string, script: string): Promise<SandboxResult> {
  const req = writeRequest({ slug, command: 'python3 a.py', inputs: { 'a.py': `${script}\n` } });
  const checked = checkText(basename(req.file), readFileSync(req.file, 'utf8'));
  assert.deepEqual(checked.problems, []);
  const r = await runAction(actionFromToolRequest(checked.value as ToolRequest), { workspace: openWorkspace(mkdtempSync(join(tmpdir(), 'airlock-ws-'))), inputsDir: req.dir });
  assert.equal(r.kind, 'ran', JSON.stringify(r));
  return (r as { sandboxResult: SandboxResult }).sandboxResult;
}
const reasons = (sr: SandboxResult): string => sr.verdict.reasons.join('; ');

// The attacker: paths and socket addresses in memfd_secret memory when it can get it (no other
// process, the host tracer included, can read that memory), in ordinary memory when it cannot.
const SECRET_ATTACK = `
import ctypes, mmap, os, signal, socket, struct
signal.signal(signal.SIGSYS, lambda *a: None)
l = ctypes.CDLL(None, use_errno=True)
fd = l.syscall(447, 0)  # memfd_secret
buf = None
if 0 <= fd < 256:
    os.ftruncate(fd, 4096)
    buf = mmap.mmap(fd, 4096)
    print("secret memory")
if buf is None:
    buf = mmap.mmap(-1, 4096)
base = ctypes.addressof(ctypes.c_char.from_buffer(buf))
def put(off, b):
    buf[off:off + len(b)] = b
    return ctypes.c_void_p(base + off)
l.open(put(0, b"/etc/evil\\0"), 0o101, 0o644)
l.open(put(64, b"/etc/shadow\\0"), 0)
l.open(put(128, b"/root/.ssh/id_rsa\\0"), 0)
l.mknod(put(192, b"/dev/evil\\0"), 0o20644, 0x103)
u = socket.socket(socket.AF_UNIX)
l.connect(u.fileno(), put(256, b"\\1\\0\\0airlock-probe"), 16)
s6 = socket.socket(socket.AF_INET6)
l.connect(s6.fileno(), put(320, struct.pack("<HHI16sI", 10, socket.htons(443), 0, socket.inet_pton(socket.AF_INET6, "::1"), 0)), 28)
if os.fork() == 0:
    l.execve(put(512, b"/bin/true\\0"), None, None)
    os._exit(1)
os.wait()
print("done")`;

test('the memfd_secret attack: memfd_secret is refused (trapped, reported) and every attempt made instead is seen: BLOCK', { skip }, async () => {
  const sr = await judged('secret-attack', SECRET_ATTACK);
  assert.doesNotMatch(sr.outputs.stdout.text, /secret memory/, 'the program got no secret memory');
  assert.match(sr.outputs.stdout.text, /done/);
  assert.equal(sr.verdict.recommended_action, 'BLOCK', reasons(sr));
  assert.ok(sr.side_effects.privileged_syscalls?.some((p) => p.name === 'memfd_secret' && p.denied), JSON.stringify(sr.side_effects.privileged_syscalls));
  const files = sr.side_effects.file_access_attempts?.map((a) => `${a.access} ${a.path}`) ?? [];
  for (const f of ['write /etc/evil', 'read /etc/shadow', 'read /root/.ssh/id_rsa']) assert.ok(files.includes(f), `${f} unseen: ${JSON.stringify(files)}`);
  assert.ok(sr.side_effects.device_access?.some((d) => d.path === '/dev/evil'), JSON.stringify(sr.side_effects.device_access));
  const net = sr.side_effects.network_attempts?.map((n) => `${n.protocol} ${n.address}:${n.port}`) ?? [];
  for (const n of ['unix @airlock-probe:0', 'tcp ::1:443']) assert.ok(net.includes(n), `${n} unseen: ${JSON.stringify(net)}`);
  assert.ok(sr.side_effects.executables?.includes('/bin/true'), JSON.stringify(sr.side_effects.executables));
});

test('arguments the host cannot read (pointers into nothing) are attempts all the same: listed as unreadable, BLOCK (JG_UNREADABLE_ARGUMENT)', { skip }, async () => {
  const sr = await judged('unreadable', [
    'import ctypes, os, socket',
    'l = ctypes.CDLL(None, use_errno=True)',
    'nothing = ctypes.c_void_p(0x10000)  # below mmap_min_addr: never mapped',
    'print(l.open(nothing, 0o101, 0o644), ctypes.get_errno())',
    'print(l.mkdir(nothing, 0o755), ctypes.get_errno())',
    's = socket.socket()',
    'print(l.connect(s.fileno(), nothing, 16), ctypes.get_errno())',
    'print(l.execve(nothing, None, None), ctypes.get_errno())',
  ].join('\n'));
  assert.equal(sr.outputs.stdout.text, '-1 14\n-1 14\n-1 14\n-1 14\n', 'the kernel refused them too (EFAULT)');
  assert.equal(sr.verdict.recommended_action, 'BLOCK', reasons(sr));
  assert.deepEqual(sr.side_effects.unreadable_syscalls?.map((u) => u.name).sort(), ['connect', 'execve', 'mkdir', 'openat']);
  assert.equal(sr.compliance.sandbox_requirements_met, false);
  assert.ok(sr.verdict.reasons.some((r) => /^JG_UNREADABLE_ARGUMENT: .*openat x1/.test(r)), reasons(sr));
});

test('memory the host tracer cannot read at all (memfd_secret, through a filter that lets it pass): each attempt is an unreadable event, none is dropped', { skip }, async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-secret-'));
  chmodSync(dir, 0o755); // the sandbox runs as nobody
  try {
    const src = join(dir, 'secret.c');
    writeFileSync(src, String.raw`
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>
int main(void) {
  long fd = syscall(447, 0);
  if (fd < 0 || ftruncate((int)fd, 4096) != 0) return 2;
  char *m = mmap(0, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, (int)fd, 0);
  if (m == MAP_FAILED) return 3;
  strcpy(m, "/etc/evil"); open(m, O_WRONLY | O_CREAT, 0644);
  strcpy(m + 64, "/etc/shadow"); open(m + 64, O_RDONLY);
  strcpy(m + 128, "/dev/evil"); mknod(m + 128, S_IFCHR | 0644, makedev(1, 3));
  struct sockaddr_un *u = (void *)(m + 256); u->sun_family = AF_UNIX; memcpy(u->sun_path, "\0airlock-probe", 14);
  connect(socket(AF_UNIX, SOCK_STREAM, 0), (void *)u, 2 + 14);
  struct sockaddr_in6 *a = (void *)(m + 512); a->sin6_family = AF_INET6; a->sin6_port = htons(443); a->sin6_addr = in6addr_loopback;
  connect(socket(AF_INET6, SOCK_STREAM, 0), (void *)a, sizeof *a);
  strcpy(m + 1024, "/bin/true");
  if (fork() == 0) { char *argv[] = {"true", 0}; execve(m + 1024, argv, 0); _exit(1); }
  wait(0);
  return 0;
}`);
    const bin = join(dir, 'secret');
    const cc = spawnSync('cc', ['-O1', '-o', bin, src], { encoding: 'utf8' });
    assert.equal(cc.status, 0, cc.stderr);
    if (spawnSync(bin).status === 2) return t.skip('memfd_secret is unavailable on this kernel (secretmem.enable=0)');
    // Our filter refuses memfd_secret; a future kind of unreadable memory would not be. Stand-in: three
    // instructions before the real program that let memfd_secret (447 on x86_64 and aarch64) through.
    const pass = Buffer.alloc(24);
    pass.writeUInt16LE(0x20, 0); // ld [nr]
    pass.writeUInt16LE(0x15, 8); // jeq 447, 0, 1
    pass.writeUInt8(1, 11);
    pass.writeUInt32LE(447, 12);
    pass.writeUInt16LE(0x06, 16); // ret ALLOW
    pass.writeUInt32LE(0x7fff0000, 20);
    const filter = join(dir, 'filter.bpf');
    writeFileSync(filter, Buffer.concat([pass, buildSeccompFilter(process.arch, { observe: true })]));
    const l = launchWithTracer(tracer!, {
      argv: ['/usr/bin/bwrap', '--unshare-user', '--unshare-pid', '--unshare-net', '--ro-bind', '/', '/', '--proc', '/proc', '--dev', '/dev', '--info-fd', '3', '--block-fd', '4', '--seccomp', '5', '--', bin],
      stdoutFifo: join(dir, 'o'),
      stderrFifo: join(dir, 'e'),
      seccompFile: filter,
      cgroupProcs: [],
      limits: { cpuSoftS: 5, cpuHardS: 6, fsizeBytes: null, asBytes: null, nproc: null, uid: 65534, gid: 65534 },
      hold: false,
    });
    l.stdout.resume();
    let err = '';
    l.stderr.on('data', (d: Buffer) => (err += d.toString()));
    const closed = await l.closed;
    assert.equal(closed.code, 0, `${JSON.stringify(closed)} ${err}`);
    await l.trace!.done;
    const se = sideEffectsFromTrace(l.trace!.lines, null).sideEffects;
    assert.deepEqual(
      se.unreadableSyscalls?.map((u) => `${u.syscall} x${u.count}`).sort(),
      ['connect x2', 'execve x1', 'mknodat x1', 'openat x2'],
      l.trace!.lines.join('\n'),
    );
    assert.deepEqual([se.fileAccess, se.deviceAccess, se.networkAttempts.filter((n) => n.syscall !== 'socket')], [[], [], []], 'nothing was read as a wrong or partial path');
  } finally {
    rmSync(dir, { recursive: true, force: true });
  }
});

test('write-only memory does not hide a path from the host tracer (it reads what the kernel reads)', { skip }, async () => {
  const o = await py([
    'import ctypes, mmap',
    'l = ctypes.CDLL(None, use_errno=True)',
    'm = mmap.mmap(-1, 4096, prot=mmap.PROT_WRITE)',
    'm.write(b"/etc/evil-wo\\0")',
    'print(l.open(ctypes.c_void_p(ctypes.addressof(ctypes.c_char.from_buffer(m))), 0o101, 0o644), ctypes.get_errno())',
  ].join('\n'));
  assert.equal(o.stdout.bytes.toString(), '-1 30\n', text(o));
  assert.deepEqual(o.sideEffects?.fileAccess.map((a) => `${a.access} ${a.path} ${a.result}`), ['write /etc/evil-wo EROFS']);
  assert.deepEqual(o.sideEffects?.unreadableSyscalls, []);
});

test('syscalls off the allowlist are refused with ENOSYS and reported (a person looks: JG_SYSCALL_REFUSED); the new mount calls are trapped (BLOCK)', { skip }, async () => {
  const sr = await judged('unlisted', [
    'import ctypes',
    'l = ctypes.CDLL(None, use_errno=True)',
    'for nr in (100000, 468):  # a number no kernel knows; file_getattr (Linux 6.17)',
    '    print(l.syscall(nr, 0, 0, 0, 0, 0), ctypes.get_errno())',
  ].join('\n'));
  assert.equal(sr.outputs.stdout.text, '-1 38\n-1 38\n', 'refused with ENOSYS: the program goes on');
  assert.equal(sr.execution.status, 'SUCCESS');
  assert.deepEqual(sr.side_effects.refused_syscalls, [{ name: 'syscall_100000', count: 1 }, { name: 'file_getattr', count: 1 }]);
  assert.equal(sr.verdict.recommended_action, 'REQUIRE_CONFIRMATION', reasons(sr));
  assert.ok(sr.verdict.reasons.some((r) => r.startsWith('JG_SYSCALL_REFUSED: ') && r.includes('file_getattr x1')), reasons(sr));
  for (const [name, nr] of [['listmount', 458], ['statmount', 457], ['open_tree_attr', 467]] as const) {
    const o = await py(`import ctypes\nctypes.CDLL(None).syscall(${nr}, 0, 0, 0, 0)`);
    assert.equal(o.status, 'POLICY_ABORTED', text(o));
    assert.deepEqual(o.sideEffects?.privilegedSyscalls, [{ name, count: 1, outcome: 'trapped' }]);
  }
});

const MEMFD_EXEC = [
  'import os',
  'fd = os.memfd_create("payload")',
  'os.write(fd, open("/bin/true", "rb").read())',
  'pid = os.fork()',
  'if pid == 0:',
  '    os.execve(fd, ["payload"], {})',
  'print(os.waitstatus_to_exitcode(os.waitpid(pid, 0)[1]))',
].join('\n');

test('exec of an anonymous file (memfd_create + fexecve) is recorded as such and needs a person (JG_ANONYMOUS_EXEC)', { skip }, async () => {
  const sr = await judged('memfd-exec', MEMFD_EXEC);
  assert.equal(sr.outputs.stdout.text, '0\n');
  assert.deepEqual(sr.side_effects.anonymous_executables, ['/memfd:payload']);
  assert.ok(sr.side_effects.executables?.includes('/memfd:payload'), JSON.stringify(sr.side_effects.executables));
  assert.equal(sr.verdict.recommended_action, 'REQUIRE_CONFIRMATION', reasons(sr));
  assert.ok(sr.verdict.reasons.some((r) => r.startsWith('JG_ANONYMOUS_EXEC: ')), reasons(sr));
});

test('strace observes the same unreadable attempts and anonymous executables as the host tracer', { skip }, async () => {
  const code = [
    'import ctypes, socket',
    'l = ctypes.CDLL(None, use_errno=True)',
    'nothing = ctypes.c_void_p(0x10000)',
    'l.open(nothing, 0)',
    'l.connect(socket.socket().fileno(), nothing, 16)',
    MEMFD_EXEC,
  ].join('\n');
  const summary = (o: Awaited<ReturnType<typeof py>>) => ({
    unreadable: o.sideEffects?.unreadableSyscalls,
    anonymous: o.sideEffects?.processesSpawned.executables.filter((e) => e.anonymous),
  });
  const ours = await py(code);
  const theirs = await pyUnderStrace(code);
  assert.equal(theirs.host.syscallTracer, 'strace');
  assert.deepEqual(summary(ours), { unreadable: [{ syscall: 'openat', count: 1 }, { syscall: 'connect', count: 1 }], anonymous: [{ path: '/memfd:payload', count: 1, anonymous: true }] });
  assert.deepEqual(summary(theirs), summary(ours));
});
