// Host-side observation of the sandboxed program through strace.
//
// strace runs on the host, outside every namespace bwrap creates, and writes its log there: the
// program can neither forge nor erase it. The program does control strings that strace prints (file
// names, socket paths, argv); strace escapes them (\" \n \NNN, and < > inside -y decorations), so a
// crafted name cannot end a line or a string early. The parser still treats every line as hostile:
// it never throws, and a line it cannot read is counted in `unparsedLines`, never trusted.
//
// Whose events count (derived from real bwrap 0.8 traces, see test/sandbox/strace.test.ts):
//   - the pid whose first successful execve runs `bwrapPath` is bwrap on the host side;
//   - bwrap's children (the namespace's pid 1, its forked child) run bwrap's own setup code (mounts,
//     /newroot/dev/... opens) until they execve: the first successful execve of a bwrap-side child is
//     the sandboxed program's first process (`programPid`), and everything it does from then on counts;
//   - every process or thread created by a sandboxed process is sandboxed from birth;
//   - a pid we cannot link to a parent counts as sandboxed (over-reporting is safe, hiding is not).
// Parent links come from clone/fork return values; `--pidns-translation` makes strace print the host
// pid of a child created inside the sandbox's pid namespace (`= 2 /* 11483 in strace's PID NS */`).

import { posix } from 'node:path';
import { DENIED_SYSCALLS, isAllowedName, isTrappedName, syscallName } from '../ns/seccomp.js';
import { FD_WRITE_CALLS, isSecretPath, PATH_WRITE_ARGS, WRITE_FLAGS } from './file-access.js';
import { WorkingDirs } from './working-dirs.js';
import type {
  DeviceAccess,
  FileAccess,
  NetFamily,
  NetworkAttempt,
  ObservedSideEffects,
  PrivilegedOutcome,
  PrivilegedSyscall,
  SignalSent,
} from './types.js';
export type { ObservedSideEffects } from './types.js';

const PROCESS_SYSCALLS = ['execve', 'execveat', 'clone', 'clone3', '?fork', '?vfork'];
const SIGNAL_SYSCALLS = ['kill', 'tkill', 'tgkill', 'rt_sigqueueinfo', 'rt_tgsigqueueinfo', 'pidfd_send_signal'];
const NETWORK_SYSCALLS = ['socket', 'connect', 'bind', 'sendto', 'sendmsg', 'sendmmsg'];
const FILE_SYSCALLS = ['chdir', 'fchdir', '?open', 'openat', 'openat2', '?creat', '?mknod', 'mknodat', ...Object.keys(PATH_WRITE_ARGS).map((n) => (['mkdirat', 'unlinkat', 'fchmodat', 'fchownat', 'renameat2', 'linkat', 'symlinkat', 'truncate'].includes(n) ? n : `?${n}`)), ...FD_WRITE_CALLS];

/** Plain syscall names of the denied families (the filter traps them; tracing them too catches a run
 *  where the filter was missing: the call then shows up as 'succeeded' or 'denied'). */
const PRIVILEGED_NAMES: ReadonlySet<string> = new Set(
  Object.values(DENIED_SYSCALLS)
    .flat()
    .filter((n) => /^[a-z_0-9]+$/.test(n)),
);

/**
 * The strace prefix the runner puts before `bwrap ...`. Flags:
 * -f follow forks; -q no attach chatter (exit lines stay: their order tells which processes outlived the program); -y decorate fds with paths (`AT_FDCWD</dev>`, `= 3</dev/null>`)
 * so relative opens are resolved; --seccomp-bpf stops only on traced syscalls (the overhead driver);
 * --pidns-translation gives host pids of children created in the sandbox's pid namespace;
 * -s 256 caps data strings (paths are printed whole regardless); -e signal=SIGSYS logs only the signal
 * that reveals a trapped syscall.
 */
export function straceArgv(logFile: string): string[] {
  // `?`: a name this arch or this strace does not know (iopl on aarch64, listmount before strace 6.8) is skipped.
  const privileged = [...PRIVILEGED_NAMES].map((n) => `?${n}`);
  const trace = [...PROCESS_SYSCALLS, ...SIGNAL_SYSCALLS, ...NETWORK_SYSCALLS, ...FILE_SYSCALLS, ...privileged];
  return [
    'strace', '-f', '-q', '-y', '--seccomp-bpf', '--pidns-translation', '-s', '256',
    '-e', 'signal=SIGSYS', '-e', `trace=${trace.join(',')}`, '-o', logFile, '--',
  ];
}

// ---- line parsing --------------------------------------------------------------------------------

interface SyscallEvent {
  kind: 'syscall';
  idx: number;
  pid: number;
  name: string;
  args: string[];
  ret: string;
}
interface SignalEvent {
  kind: 'sigsys';
  idx: number;
  pid: number;
  syscall: string;
  arch: string;
}
interface ExitEvent {
  kind: 'exit';
  idx: number;
  pid: number;
}
type Event = SyscallEvent | SignalEvent | ExitEvent;

/** Splits `a, {b, c}, "d, e"` at top-level commas; quotes, -y decorations `<...>` and brackets nest. */
function splitTop(s: string): { parts: string[]; end: number } | null {
  const parts: string[] = [];
  let depth = 0;
  let start = 0;
  for (let i = 0; i < s.length; i++) {
    const c = s[i];
    if (c === '"' || c === '<') {
      const close = c === '"' ? '"' : '>';
      i++;
      while (i < s.length && s[i] !== close) i += s[i] === '\\' ? 2 : 1;
      if (i >= s.length) return null;
      continue;
    }
    if (c === '/' && s[i + 1] === '*') {
      const j = s.indexOf('*/', i + 2);
      if (j < 0) return null;
      i = j + 1;
      continue;
    }
    if (c === '(' || c === '{' || c === '[') depth++;
    else if (c === ']' || c === '}') depth--;
    else if (c === ')') {
      if (depth === 0) {
        if (i > start || parts.length > 0) parts.push(s.slice(start, i).trim());
        return { parts, end: i };
      }
      depth--;
    } else if (c === ',' && depth === 0) {
      parts.push(s.slice(start, i).trim());
      start = i + 1;
    }
    if (depth < 0) return null;
  }
  return null;
}

const ESCAPES: Record<string, number> = { n: 10, t: 9, r: 13, v: 11, f: 12, a: 7, b: 8, '\\': 92, '"': 34, "'": 39, e: 27 };

/** Decodes strace's C-style escaping (\" \\ \n \NNN \xNN) into a string (invalid UTF-8 becomes U+FFFD). */
export function unescapeStrace(body: string): string {
  const bytes: number[] = [];
  for (let i = 0; i < body.length; i++) {
    const c = body.charCodeAt(i);
    if (c !== 92) {
      // strace prints non-ASCII as escapes; anything else here is kept as its UTF-8 bytes.
      for (const b of Buffer.from(body[i] ?? '', 'utf8')) bytes.push(b);
      continue;
    }
    const n = body[i + 1] ?? '';
    const oct = /^[0-7]{1,3}/.exec(body.slice(i + 1, i + 4));
    if (oct) {
      bytes.push(parseInt(oct[0], 8) & 0xff);
      i += oct[0].length;
    } else if (n === 'x' && /^[0-9a-fA-F]{2}$/.test(body.slice(i + 2, i + 4))) {
      bytes.push(parseInt(body.slice(i + 2, i + 4), 16));
      i += 3;
    } else if (n in ESCAPES) {
      bytes.push(ESCAPES[n] as number);
      i++;
    } else {
      bytes.push(92);
    }
  }
  return Buffer.from(bytes).toString('utf8');
}

/** The string of a quoted argument (`"..."`, possibly followed by `...` when truncated), else null. */
function quoted(arg: string | undefined): string | null {
  if (arg === undefined) return null;
  const m = /^@?"((?:[^"\\]|\\.)*)"(\.\.\.)?$/s.exec(arg.trim());
  return m ? unescapeStrace(m[1] ?? '') : null;
}

/** A -y name of a file that no path reaches: a memfd, a deleted file. */
const ANONYMOUS_FILE = /^\/memfd:| \(deleted\)$/;

/**
 * The file a descriptor argument refers to, by the name its -y decoration gives, when a path of the
 * file system still reaches it: not a pipe or a socket (`pipe:[7]`), a memfd or a deleted file (as
 * execveat's anonymous executables).
 */
function namedFile(arg: string | undefined): string | null {
  const d = decoration(arg);
  return d !== null && d.startsWith('/') && !ANONYMOUS_FILE.test(d) ? d : null;
}

/** A path call that acts on its dirfd: NULL for utimensat and futimesat (futimens), "" with AT_EMPTY_PATH. */
function actsOnDirfd(e: SyscallEvent, pathIdx: number): boolean {
  const arg = (e.args[pathIdx] ?? '').trim();
  if (arg === 'NULL') return e.name === 'utimensat' || e.name === 'futimesat';
  return quoted(arg) === '' && e.args.slice(pathIdx + 1).some((a) => /\bAT_EMPTY_PATH\b/.test(a));
}

/**
 * A relative path from a dirfd strace could not name (no -y decoration: a non-dumpable program's
 * descriptor, for a tracer that is not root), or from a cwd the parser lost: where the call went is unknown.
 */
const unnamedStart = (requested: string | null, base: string | null): boolean => requested !== null && !requested.startsWith('/') && base === null;

/** The -y decoration of an fd argument or return value: `3</dev/null>` / `AT_FDCWD</tmp>` -> the path. */
function decoration(s: string | undefined): string | null {
  if (s === undefined) return null;
  const m = /^(?:-?\d+|AT_FDCWD)<((?:[^>\\]|\\.)*)>/s.exec(s.trim());
  if (!m) return null;
  // Device fds may carry a nested `<char 1:3>` suffix in newer strace versions.
  return unescapeStrace((m[1] ?? '').replace(/<(?:char|block) \d+:\d+$/, ''));
}

const LINE = /^(\d+) +(.*)$/s;
const SYSCALL_START = /^([a-z_][a-z0-9_]*)\(/;
const RESUMED = /^<\.\.\. ([a-z_][a-z0-9_]*) resumed>(.*)$/s;
const UNFINISHED = ' <unfinished ...>';
const SIGSYS = /^--- SIGSYS \{.*si_code=SYS_SECCOMP.*si_syscall=(__NR_[a-z0-9_]+|\d+), si_arch=([A-Z0-9_]+)\} ---$/;

function parseComplete(idx: number, pid: number, name: string, text: string): SyscallEvent | null {
  const open = name.length + 1; // text starts with `name(`
  const split = splitTop(text.slice(open));
  if (split === null) return null;
  const after = text.slice(open + split.end + 1);
  const m = /^ +=\s+(.*)$/s.exec(after);
  if (!m) return null;
  return { kind: 'syscall', idx, pid, name, args: split.parts, ret: (m[1] ?? '').trim() };
}

function parseLines(text: string): { events: Event[]; unparsed: number } {
  const events: Event[] = [];
  const pending = new Map<number, { name: string; text: string }>();
  let unparsed = 0;
  const lines = text.split('\n');
  for (let idx = 0; idx < lines.length; idx++) {
    const raw = (lines[idx] ?? '').replace(/\r$/, '');
    if (raw === '') continue;
    const lm = LINE.exec(raw);
    if (!lm) {
      unparsed++;
      continue;
    }
    const pid = Number(lm[1]);
    const rest = lm[2] ?? '';
    if (rest.startsWith('+++ ')) {
      // A task's end: their order tells which processes outlived the program's first one.
      if (/^\+\+\+ (?:exited with|killed by) /.test(rest)) events.push({ kind: 'exit', idx, pid });
      continue;
    }
    if (rest.startsWith('--- ')) {
      const sm = SIGSYS.exec(rest);
      if (sm) events.push({ kind: 'sigsys', idx, pid, syscall: (sm[1] ?? '').replace(/^__NR_/, ''), arch: sm[2] ?? '' });
      else if (!/^--- SIG[A-Z0-9]+ .* ---$/.test(rest)) unparsed++;
      continue;
    }
    const rm = RESUMED.exec(rest);
    if (rm) {
      const p = pending.get(pid);
      pending.delete(pid);
      if (!p || p.name !== rm[1]) {
        unparsed++;
        continue;
      }
      const ev = parseComplete(idx, pid, p.name, p.text + (rm[2] ?? ''));
      if (ev) events.push(ev);
      else unparsed++;
      continue;
    }
    const sm = SYSCALL_START.exec(rest);
    if (!sm) {
      unparsed++;
      continue;
    }
    const name = sm[1] ?? '';
    if (rest.endsWith(UNFINISHED)) {
      pending.set(pid, { name, text: rest.slice(0, -UNFINISHED.length) });
      continue;
    }
    const ev = parseComplete(idx, pid, name, rest);
    if (ev) events.push(ev);
    else unparsed++;
  }
  return { events, unparsed: unparsed + pending.size };
}

// ---- interpretation ------------------------------------------------------------------------------

/** 'ok' for a non-negative return, the errno name for a failure, 'unknown' for `?`. */
function resultOf(ret: string): string {
  const m = /^(-?\d+|0x[0-9a-f]+)/.exec(ret);
  if (!m) return 'unknown';
  if ((m[1] ?? '').startsWith('-')) return /^-\d+ ([A-Z0-9_]+)/.exec(ret)?.[1] ?? 'error';
  return 'ok';
}

/** The host pid of a child from a clone/fork return value (translated when strace says so). */
function childPid(ret: string): number | null {
  const t = /^\d+ \/\* (\d+) in strace's PID NS \*\//.exec(ret);
  if (t) return Number(t[1]);
  const m = /^(\d+)(?!\d)/.exec(ret);
  const n = m ? Number(m[1]) : 0;
  return n > 0 ? n : null;
}

/** A pid argument, plain or `2 /* 11483 in strace's PID NS *\/`. */
function pidArg(arg: string | undefined): { pid: number | null; host: number | null } {
  const m = /^(-?\d+)(?: \/\* (\d+) in strace's PID NS \*\/)?/.exec((arg ?? '').trim());
  if (!m) return { pid: null, host: null };
  return { pid: Number(m[1]), host: m[2] !== undefined ? Number(m[2]) : null };
}

const HARMLESS_DEV = new Set(['/dev', '/dev/null', '/dev/zero', '/dev/full', '/dev/random', '/dev/urandom', '/dev/tty', '/dev/ptmx', '/dev/stdin', '/dev/stdout', '/dev/stderr', '/dev/pts', '/dev/shm', '/dev/fd']);
const HARMLESS_DEV_PREFIX = ['/dev/pts/', '/dev/fd/', '/dev/shm/'];

/** True for a /dev path outside the documented harmless set. */
export function isDevicePath(p: string): boolean {
  const n = posix.normalize(p).replace(/\/+$/, '') || '/';
  if (n !== '/dev' && !n.startsWith('/dev/')) return false;
  if (HARMLESS_DEV.has(n)) return false;
  return !HARMLESS_DEV_PREFIX.some((x) => n.startsWith(x));
}

function familyOf(af: string): NetFamily {
  if (af === 'AF_INET') return 'inet';
  if (af === 'AF_INET6') return 'inet6';
  if (af === 'AF_UNIX' || af === 'AF_LOCAL') return 'unix';
  if (af === 'AF_NETLINK') return 'netlink';
  return 'other';
}

function protocolOf(family: NetFamily, type: string, proto: string): string | null {
  const p = proto.replace(/^IPPROTO_/, '').replace(/^NETLINK_/, '').toLowerCase();
  if (family === 'netlink') return p || null;
  if (p === 'icmp' || p === 'icmpv6' || p === 'sctp' || p === 'udplite') return p;
  if (type.includes('SOCK_STREAM')) return family === 'unix' ? 'stream' : 'tcp';
  if (type.includes('SOCK_DGRAM')) return family === 'unix' ? 'dgram' : 'udp';
  if (type.includes('SOCK_RAW')) return 'raw';
  if (type.includes('SOCK_SEQPACKET')) return 'seqpacket';
  return type.split('|')[0]?.toLowerCase() || null;
}

interface SockAddr {
  family: NetFamily;
  address: string | null;
  port: number | null;
  path: string | null;
}

/** Every `{sa_family=...}` in an argument (sendmsg/sendmmsg nest them). */
function sockaddrs(arg: string): SockAddr[] {
  const out: SockAddr[] = [];
  const re = /\{sa_family=([A-Z0-9_]+)/g;
  for (let m = re.exec(arg); m !== null; m = re.exec(arg)) {
    const body = arg.slice(m.index, m.index + 4096);
    const family = familyOf(m[1] ?? '');
    const port = /sin6?_port=htons\((\d+)\)/.exec(body);
    const v4 = /sin_addr=inet_addr\("([0-9.]+)"\)/.exec(body);
    const v6 = /inet_pton\(AF_INET6, "([0-9a-fA-F:.]+)"/.exec(body);
    const sun = /sun_path=(@?)"((?:[^"\\]|\\.)*)"/.exec(body);
    const nl = /nl_pid=(\d+)/.exec(body);
    out.push({
      family,
      address: v4?.[1] ?? v6?.[1] ?? (nl ? `nl_pid=${nl[1]}` : null),
      port: port ? Number(port[1]) : null,
      path: sun ? (sun[1] ?? '') + unescapeStrace(sun[2] ?? '') : null,
    });
  }
  return out;
}

/** Parses an strace log written with `straceArgv` into the program's side effects; `cwd` is where the program starts (bwrap's --chdir). Never throws. */
export function parseStraceLog(text: string, opts: { bwrapPath: string; cwd: string }): ObservedSideEffects {
  const input = typeof text === 'string' ? text : '';
  const { events, unparsed } = parseLines(input);

  // Pass 1: parent links, first successful execve per pid, bwrap's pid.
  const parent = new Map<number, { pid: number; idx: number; sharesFs: boolean }>();
  const execIdx = new Map<number, number>();
  let bwrapPid: number | null = null;
  let bwrapExecIdx = -1;
  for (const e of events) {
    if (e.kind !== 'syscall') continue;
    if (e.name === 'clone' || e.name === 'clone3' || e.name === 'fork' || e.name === 'vfork') {
      const child = childPid(e.ret);
      if (child !== null && child !== e.pid) parent.set(child, { pid: e.pid, idx: e.idx, sharesFs: /\bCLONE_FS\b/.test(e.args.join(',')) });
    } else if ((e.name === 'execve' || e.name === 'execveat') && resultOf(e.ret) === 'ok') {
      const path = quoted(e.name === 'execve' ? e.args[0] : e.args[1]);
      if (bwrapPid === null && path === opts.bwrapPath) {
        bwrapPid = e.pid;
        bwrapExecIdx = e.idx;
      } else if (!execIdx.has(e.pid) && !(e.pid === bwrapPid && e.idx <= bwrapExecIdx)) {
        execIdx.set(e.pid, e.idx);
      }
    }
  }

  // sandboxedFrom(pid): the line index from which the pid runs the program's code (Infinity: never).
  const from = new Map<number, number>();
  const sandboxedFrom = (pid: number): number => {
    const chain: number[] = [];
    const seen = new Set<number>();
    let p: number | undefined = pid;
    // Walk up until a known value or a root; iterative so a 100k-deep fork chain cannot blow the stack.
    while (p !== undefined && !from.has(p) && !seen.has(p)) {
      seen.add(p);
      chain.push(p);
      p = p === bwrapPid ? undefined : parent.get(p)?.pid;
    }
    for (let i = chain.length - 1; i >= 0; i--) {
      const q = chain[i] as number;
      let v: number;
      if (q === bwrapPid) v = execIdx.get(q) ?? Infinity;
      else {
        const link = parent.get(q);
        if (!link || !from.has(link.pid)) v = 0; // unknown parent, or a cycle from pid reuse: count it
        else v = (from.get(link.pid) as number) <= link.idx ? 0 : (execIdx.get(q) ?? Infinity);
      }
      from.set(q, v);
    }
    return from.get(pid) ?? 0;
  };
  if (bwrapPid === null) execIdx.clear(); // no bwrap seen: every event counts, every exec is the program's

  const isSandboxed = (pid: number, idx: number): boolean => sandboxedFrom(pid) <= idx;

  // Pass 2: side effects of sandboxed events only.
  let programPid: number | null = null;
  let processes = 0;
  let threads = 0;
  let refusedForks = 0;
  const executables = new Map<string, number>();
  const anonymous = new Set<string>();
  const unreadable = new Map<string, number>();
  const refused = new Map<string, number>();
  /** An argument strace printed as an address: it could not read it. */
  const unread = (arg: string | undefined): boolean => /^0x[0-9a-f]+$/.test((arg ?? '').trim());
  const addUnreadable = (name: string): void => void unreadable.set(name, (unreadable.get(name) ?? 0) + 1);
  /** A call strace could not say where it went: unobserved, unless the kernel found no such descriptor. */
  const unnamed = (e: SyscallEvent, res: string): void => void (res !== 'EBADF' && addUnreadable(e.name));
  const signalsSent: SignalSent[] = [];
  const networkAttempts: NetworkAttempt[] = [];
  const deviceAccess: DeviceAccess[] = [];
  const fileAccess: FileAccess[] = [];
  const privileged = new Map<string, PrivilegedSyscall>();
  const sockets = new Map<string, { family: NetFamily; protocol: string | null }>();
  const addPriv = (name: string, outcome: PrivilegedOutcome): void => {
    const key = `${name}\0${outcome}`;
    const cur = privileged.get(key);
    if (cur) cur.count++;
    else privileged.set(key, { name, count: 1, outcome });
  };
  const dirs = new WorkingDirs((pid) => parent.get(pid));
  /** Where a path relative to this dirfd argument starts: its -y name, the tracked cwd for a bare AT_FDCWD. */
  const dirOf = (pid: number, arg: string | undefined): string | null => decoration(arg) ?? ((arg ?? '').trim() === 'AT_FDCWD' ? dirs.get(pid) : null);
  const socketOf = (pid: number, fdArg: string | undefined): { family: NetFamily; protocol: string | null } | null => {
    const fd = /^(\d+)/.exec((fdArg ?? '').trim())?.[1];
    if (fd === undefined) return null;
    // fds are inherited: look in the process, then up its ancestry.
    let p: number | undefined = pid;
    for (let hops = 0; p !== undefined && hops < 64; hops++) {
      const s = sockets.get(`${p}:${fd}`);
      if (s) return s;
      p = parent.get(p)?.pid;
    }
    return null;
  };

  const children = new Set<number>();
  const endedBeforeProgram = new Set<number>();
  let programEnded = false;
  for (const e of events) {
    if (!isSandboxed(e.pid, e.idx)) continue;
    if (e.kind === 'exit') {
      if (e.pid === programPid) programEnded = true;
      else if (!programEnded) endedBeforeProgram.add(e.pid);
      continue;
    }
    if (e.kind === 'sigsys') {
      const nativeArch = e.arch === 'AUDIT_ARCH_X86_64' || e.arch === 'AUDIT_ARCH_AARCH64';
      // A number this strace has no name for may be one our tables know (listmount on strace 6.1).
      const name = /^\d+$/.test(e.syscall) ? (nativeArch ? syscallName(Number(e.syscall), e.arch === 'AUDIT_ARCH_X86_64' ? 'x86_64' : 'aarch64') : null) ?? `syscall_${e.syscall}` : e.syscall;
      if (!nativeArch) addPriv(`${e.arch.replace(/^AUDIT_ARCH_/, '').toLowerCase()}:${name}`, 'trapped');
      else if (isTrappedName(name)) addPriv(name, 'trapped');
      // An allowed name trapped: an x32 call (strace strips the x32 bit). Else off the allowlist: refused.
      else if (isAllowedName(name)) addPriv(`x32:${name}`, 'trapped');
      else refused.set(name, (refused.get(name) ?? 0) + 1);
      continue;
    }
    const res = resultOf(e.ret);
    switch (e.name) {
      case 'execve':
      case 'execveat': {
        const pathArg = e.name === 'execve' ? e.args[0] : e.args[1];
        if (unread(pathArg)) addUnreadable(e.name);
        if (res !== 'ok') break;
        let path = quoted(pathArg) ?? '?';
        // fexecve: execveat(fd, "", AT_EMPTY_PATH) runs the file behind fd, which -y names; one without
        // a name anywhere (a memfd, a deleted file) is anonymous, as the host tracer tells from its nlink.
        const behind = e.name === 'execveat' && path === '' ? decoration(e.args[0]) : null;
        if (behind !== null) {
          path = behind;
          if (ANONYMOUS_FILE.test(behind)) anonymous.add(path);
        }
        executables.set(path || '?', (executables.get(path || '?') ?? 0) + 1);
        if (programPid === null && ((execIdx.get(e.pid) === e.idx && sandboxedFrom(e.pid) === e.idx) || bwrapPid === null)) {
          programPid = e.pid;
          dirs.start(e.pid, opts.cwd);
        }
        break;
      }
      case 'clone':
      case 'clone3':
      case 'fork':
      case 'vfork': {
        const flags = e.args[e.name === 'clone' ? 1 : 0] ?? '';
        const newNs = /CLONE_NEW(NS|CGROUP|UTS|IPC|USER|PID|NET|TIME)/.test(e.args.join(','));
        if (newNs) addPriv('clone(CLONE_NEW*)', res === 'ok' ? 'succeeded' : /^(EPERM|EACCES|ENOSYS)$/.test(res) ? 'denied' : 'failed');
        if (res === 'EAGAIN') refusedForks++;
        if (res !== 'ok') break;
        const child = childPid(e.ret);
        if (child !== null) dirs.born(child);
        if (/CLONE_THREAD/.test(e.name === 'clone' ? e.args.join(',') : flags)) threads++;
        else {
          processes++;
          if (child !== null) children.add(child);
        }
        break;
      }
      case 'chdir':
      case 'fchdir':
        if (res === 'ok') dirs.changed(e.pid, e.name === 'chdir' ? quoted(e.args[0]) : namedFile(e.args[0]));
        break;
      case 'kill':
      case 'tkill':
      case 'tgkill':
      case 'rt_sigqueueinfo':
      case 'rt_tgsigqueueinfo':
      case 'pidfd_send_signal': {
        // Target: kill/tkill/rt_sigqueueinfo arg0; tgkill/rt_tgsigqueueinfo arg1 (the thread); pidfd: none.
        const two = e.name === 'tgkill' || e.name === 'rt_tgsigqueueinfo';
        const t = e.name === 'pidfd_send_signal' ? { pid: null, host: null } : pidArg(e.args[two ? 1 : 0]);
        const sigArg = e.args[e.name === 'pidfd_send_signal' ? 1 : two ? 2 : 1] ?? '?';
        signalsSent.push({ targetPid: t.pid, targetHostPid: t.host, signal: sigArg, syscall: e.name, result: res });
        break;
      }
      case 'socket': {
        const family = familyOf((e.args[0] ?? '').trim());
        const protocol = protocolOf(family, e.args[1] ?? '', (e.args[2] ?? '').trim());
        const fd = /^(\d+)/.exec(e.ret)?.[1];
        if (fd !== undefined) sockets.set(`${e.pid}:${fd}`, { family, protocol });
        if (family !== 'unix') networkAttempts.push({ syscall: 'socket', family, protocol, address: null, port: null, path: null, result: res });
        break;
      }
      case 'connect':
      case 'bind':
      case 'sendto':
      case 'sendmsg':
      case 'sendmmsg': {
        const addrArg = e.name === 'sendto' ? e.args[4] : e.args[1];
        if (unread(addrArg) || /msg_name=0x[0-9a-f]+/.test(e.args[1] ?? '')) {
          addUnreadable(e.name);
          break;
        }
        const sock = socketOf(e.pid, e.args[0]);
        const addrs = sockaddrs(e.args.slice(1).join(', '));
        for (const a of addrs) {
          networkAttempts.push({ syscall: e.name, family: a.family, protocol: sock?.protocol ?? null, address: a.address, port: a.port, path: a.path, result: res });
        }
        break;
      }
      case 'open':
      case 'openat':
      case 'openat2':
      case 'creat':
      case 'mknod':
      case 'mknodat': {
        const at = e.name === 'openat' || e.name === 'openat2' || e.name === 'mknodat';
        if (unread(e.args[at ? 1 : 0]) || (e.name === 'openat2' && unread(e.args[2]))) {
          addUnreadable(e.name);
          break;
        }
        const requested = quoted(e.args[at ? 1 : 0]);
        const base = at ? dirOf(e.pid, e.args[0]) : dirs.get(e.pid);
        if (unnamedStart(requested, base)) {
          unnamed(e, res);
          break;
        }
        const resolved = requested === null ? null : requested.startsWith('/') ? requested : posix.join(base!, requested);
        const opened = decoration(e.ret);
        const hit = [resolved, opened].find((p) => p !== null && p.startsWith('/') && isDevicePath(p));
        if (hit !== undefined && hit !== null) deviceAccess.push({ path: posix.normalize(hit), syscall: e.name, result: res });
        if (resolved !== null && resolved.startsWith('/')) {
          const flags = e.name === 'open' ? e.args[1] : e.name === 'openat' ? e.args[2] : e.name === 'openat2' ? e.args.slice(2).join(', ') : '';
          if (e.name === 'creat' || e.name === 'mknod' || e.name === 'mknodat' || WRITE_FLAGS.test(flags ?? '')) fileAccess.push({ path: resolved, syscall: e.name, access: 'write', result: res });
          else if (isSecretPath(posix.normalize(resolved))) fileAccess.push({ path: resolved, syscall: e.name, access: 'read', result: null });
        }
        break;
      }
      default: {
        const pw = PATH_WRITE_ARGS[e.name];
        const fdArg = FD_WRITE_CALLS.includes(e.name) ? 0 : pw && pw[0] >= 0 && actsOnDirfd(e, pw[1]) ? pw[0] : -1;
        if (fdArg >= 0) {
          const file = namedFile(e.args[fdArg]);
          if (file !== null) fileAccess.push({ path: file, syscall: e.name, access: 'write', result: res });
          // No name at all: strace could not read the descriptor's link (a non-dumpable program's,
          // for a tracer that is not root).
          else if (decoration(e.args[fdArg]) === null) unnamed(e, res);
          break;
        }
        if (pw && unread(e.args[pw[1]])) addUnreadable(e.name);
        else if (pw) {
          const requested = quoted(e.args[pw[1]]);
          const base = pw[0] >= 0 ? dirOf(e.pid, e.args[pw[0]]) : dirs.get(e.pid);
          if (unnamedStart(requested, base)) {
            unnamed(e, res);
            break;
          }
          const resolved = requested === null ? null : requested.startsWith('/') ? requested : posix.join(base!, requested);
          if (resolved !== null) fileAccess.push({ path: resolved, syscall: e.name, access: 'write', result: res });
          break;
        }
        if (PRIVILEGED_NAMES.has(e.name)) {
          addPriv(e.name, res === 'ok' ? 'succeeded' : /^(EPERM|EACCES|ENOSYS)$/.test(res) ? 'denied' : 'failed');
        }
      }
    }
  }
  const outlivedProgram = programEnded ? [...children].filter((c) => !endedBeforeProgram.has(c)).length : 0;
  return assembleSideEffects({ bwrapPid, programPid, forks: processes, threads, refusedForks, executables, anonymous, outlivedProgram, signalsSent, networkAttempts, privileged, deviceAccess, fileAccess, unreadable, refused, unparsed });
}

/** The report from what a parser collected (both the strace log's and the host tracer's). */
export function assembleSideEffects(c: {
  bwrapPid: number | null;
  programPid: number | null;
  /** Processes forked by sandboxed processes (the program's own first process is added here). */
  forks: number;
  threads: number;
  refusedForks: number;
  executables: Map<string, number>;
  /** Keys of `executables` that were anonymous files. */
  anonymous: ReadonlySet<string>;
  outlivedProgram: number;
  signalsSent: SignalSent[];
  networkAttempts: NetworkAttempt[];
  privileged: Map<string, PrivilegedSyscall>;
  deviceAccess: DeviceAccess[];
  fileAccess: FileAccess[];
  unreadable: Map<string, number>;
  refused: Map<string, number>;
  unparsed: number;
}): ObservedSideEffects {
  return {
    bwrapPid: c.bwrapPid,
    programPid: c.programPid,
    processesSpawned: {
      count: c.forks + (c.programPid !== null ? 1 : 0),
      threads: c.threads,
      executables: [...c.executables].map(([path, count]) => ({ path, count, ...(c.anonymous.has(path) ? { anonymous: true as const } : {}) })).sort((a, b) => a.path.localeCompare(b.path)),
      outlivedProgram: c.outlivedProgram,
      refusedForks: c.refusedForks,
    },
    signalsSent: c.signalsSent,
    networkAttempts: c.networkAttempts,
    privilegedSyscalls: [...c.privileged.values()],
    deviceAccess: c.deviceAccess,
    fileAccess: c.fileAccess,
    unreadableSyscalls: [...c.unreadable].map(([syscall, count]) => ({ syscall, count })),
    refusedSyscalls: [...c.refused].map(([name, count]) => ({ name, count })),
    unparsedLines: c.unparsed,
  };
}
