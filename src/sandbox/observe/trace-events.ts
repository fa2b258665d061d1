// The side effects of one run from the host tracer's event lines (format: native/tracer.c's header).
// The lines come from a root process the program cannot reach, but the strings and numbers in them
// are the program's: every field is parsed defensively, and a line that cannot be read is counted in
// `unparsedLines`, never trusted and never thrown on.
import { constants } from 'node:os';
import { posix } from 'node:path';
import { AUDIT_ARCH_AARCH64, AUDIT_ARCH_X86_64, syscallName } from '../ns/seccomp.js';
import { assembleSideEffects, isDevicePath } from './strace.js';
import type { DeviceAccess, FileAccess, NetFamily, NetworkAttempt, ObservedSideEffects, PrivilegedSyscall, SignalSent } from './types.js';

const ERRNO_NAMES = new Map<number, string>(Object.entries(constants.errno).map(([k, v]) => [v, k]));
const SIGNAL_NAMES = new Map<number, string>(Object.entries(constants.signals).map(([k, v]) => [v, k]));
const X32_SYSCALL_BIT = 0x40000000;
const AUDIT_ARCH_NAMES: Record<number, string> = { 0x40000003: 'i386', 0x40000028: 'arm' };

/** `ok`, an fd (socket's result) or `e<errno>` -> 'ok' or the errno name. */
function resultOf(res: string): string {
  if (!res.startsWith('e')) return 'ok';
  const n = Number(res.slice(1));
  return ERRNO_NAMES.get(n) ?? `errno ${n}`;
}

const signalName = (n: number): string => (n === 0 ? '0' : (SIGNAL_NAMES.get(n) ?? String(n)));

function familyOf(domain: number): NetFamily {
  return domain === 1 ? 'unix' : domain === 2 ? 'inet' : domain === 10 ? 'inet6' : domain === 16 ? 'netlink' : 'other';
}

const PROTOCOLS: Record<number, string> = { 1: 'icmp', 58: 'icmpv6', 132: 'sctp', 136: 'udplite' };
const TYPES: Record<number, [string, string]> = { 1: ['tcp', 'stream'], 2: ['udp', 'dgram'], 3: ['raw', 'raw'], 5: ['seqpacket', 'seqpacket'] };

function protocolOf(family: NetFamily, type: number, proto: number): string | null {
  if (family === 'netlink') return String(proto);
  if (PROTOCOLS[proto]) return PROTOCOLS[proto] ?? null;
  const t = TYPES[type & 0xf];
  return t ? (family === 'unix' ? t[1] : t[0]) : null;
}

function ipv6(b: Buffer): string {
  const words = Array.from({ length: 8 }, (_, i) => b.readUInt16BE(i * 2));
  if (words.slice(0, 5).every((w) => w === 0) && words[5] === 0xffff) return `::ffff:${b[12]}.${b[13]}.${b[14]}.${b[15]}`;
  // Compress the longest run of zero words (RFC 5952), as inet_ntop prints it.
  let best = -1;
  let bestLen = 1;
  for (let i = 0; i < 8; ) {
    let j = i;
    while (j < 8 && words[j] === 0) j++;
    if (j - i > bestLen) [best, bestLen] = [i, j - i];
    i = j > i ? j : i + 1;
  }
  const hex = words.map((w) => w.toString(16));
  if (best < 0) return hex.join(':');
  return `${hex.slice(0, best).join(':')}::${hex.slice(best + bestLen).join(':')}`;
}

interface SockAddr {
  family: NetFamily;
  address: string | null;
  port: number | null;
  path: string | null;
}

/** A struct sockaddr as the program passed it (hex): family, address, port or unix path. */
export function decodeSockaddr(hexBytes: string): SockAddr | null {
  if (!/^(?:[0-9a-f]{2}){2,}$/.test(hexBytes)) return null;
  const b = Buffer.from(hexBytes, 'hex');
  const family = familyOf(b.readUInt16LE(0));
  if (family === 'inet' && b.length >= 8) return { family, address: `${b[4]}.${b[5]}.${b[6]}.${b[7]}`, port: b.readUInt16BE(2), path: null };
  if (family === 'inet6' && b.length >= 24) return { family, address: ipv6(b.subarray(8, 24)), port: b.readUInt16BE(2), path: null };
  if (family === 'unix') {
    const raw = b.subarray(2);
    if (raw.length === 0) return { family, address: null, port: null, path: null };
    // An abstract socket starts with a NUL byte and is not NUL-terminated.
    if (raw[0] === 0) return { family, address: null, port: null, path: `@${raw.subarray(1).toString('utf8')}` };
    const end = raw.indexOf(0);
    return { family, address: null, port: null, path: raw.subarray(0, end < 0 ? raw.length : end).toString('utf8') };
  }
  if (family === 'netlink' && b.length >= 8) return { family, address: `nl_pid=${b.readUInt32LE(4)}`, port: null, path: null };
  return { family, address: null, port: null, path: null };
}

/** A syscall's name from its number and audit arch: `i386:syscall_<nr>`, `x32:<name>`, `<name>` or `syscall_<nr>`. */
function syscallNameOf(nr: number, arch: number): string {
  if (arch !== AUDIT_ARCH_X86_64 && arch !== AUDIT_ARCH_AARCH64) return `${AUDIT_ARCH_NAMES[arch] ?? `arch_0x${arch.toString(16)}`}:syscall_${nr}`;
  const host = arch === AUDIT_ARCH_X86_64 ? 'x86_64' : 'aarch64';
  if (arch === AUDIT_ARCH_X86_64 && nr & X32_SYSCALL_BIT) return `x32:${syscallName(nr & ~X32_SYSCALL_BIT, host) ?? `syscall_${nr & ~X32_SYSCALL_BIT}`}`;
  return syscallName(nr, host) ?? `syscall_${nr}`;
}

const bump = (m: Map<string, number>, k: string): void => void m.set(k, (m.get(k) ?? 0) + 1);

const int = (s: string | undefined): number | null => (s !== undefined && /^-?\d{1,10}$/.test(s) ? Number(s) : null);
const hexText = (s: string | undefined): string | null => (s !== undefined && /^(?:[0-9a-f]{2})*$/.test(s) ? Buffer.from(s, 'hex').toString('utf8') : null);

/** `<hex path>[:<hex as written>]`: where a path led (links resolved in the sandbox) and, when links made that differ, how the program wrote it. */
function pathField(s: string | undefined): { path: string; asWritten?: string } | null {
  const [led, written, more] = (s ?? '').split(':');
  const path = hexText(led);
  if (path === null || more !== undefined) return null;
  if (written === undefined) return { path };
  const asWritten = hexText(written);
  return asWritten === null ? null : { path, asWritten };
}

export interface TraceOutcome {
  sideEffects: ObservedSideEffects;
  /** How the program's first process ended, when the tracer saw it. */
  programEnd: { code: number | null; signal: string | null } | null;
}

/**
 * Interprets one run's event lines. `bwrapPid` is the host pid node spawned bwrap as. `launcher`: the
 * sandbox's first program was this launcher (a pooled sandbox's airlock-exec), which then exec'd the
 * program in the same process: its own exec and calls are Airlock's, not the program's, and dropped.
 * Never throws.
 */
export function sideEffectsFromTrace(lines: readonly string[], bwrapPid: number | null, launcher: string | null = null): TraceOutcome {
  let programPid: number | null = null;
  /** The launcher's pid until it execs the program. */
  let launcherPid: number | null = null;
  let launcherExeced = false;
  let programEnd: TraceOutcome['programEnd'] = null;
  let processes = 0;
  let threads = 0;
  let refusedForks = 0;
  let unparsed = 0;
  const executables = new Map<string, number>();
  const anonymous = new Set<string>();
  const unreadable = new Map<string, number>();
  const refused = new Map<string, number>();
  const parent = new Map<number, number>();
  const sockets = new Map<string, { family: NetFamily; protocol: string | null }>();
  const signalsSent: SignalSent[] = [];
  const networkAttempts: NetworkAttempt[] = [];
  const deviceAccess: DeviceAccess[] = [];
  const fileAccess: FileAccess[] = [];
  const privileged = new Map<string, PrivilegedSyscall>();
  const children = new Set<number>();
  const endedBeforeProgram = new Set<number>();
  let programEnded = false;
  const socketOf = (pid: number, fd: number): { family: NetFamily; protocol: string | null } | null => {
    // fds are inherited: look in the process, then up its ancestry.
    let p: number | undefined = pid;
    for (let hops = 0; p !== undefined && hops < 64; hops++, p = parent.get(p)) {
      const s = sockets.get(`${p}:${fd}`);
      if (s) return s;
    }
    return null;
  };

  for (const line of lines) {
    const f = line.split(' ');
    const pid = int(f[1]);
    if (pid === null) {
      unparsed++;
      continue;
    }
    if (launcher !== null) {
      if (f[0] === 'P' && programPid === null && launcherPid === null) {
        launcherPid = pid;
        continue;
      }
      if (pid === launcherPid) {
        if (f[0] !== 'X') continue;
        if (!launcherExeced && f[2] !== '-' && hexText(f[2]) === launcher) {
          launcherExeced = true;
          continue;
        }
        // The program's exec: from here on, this process is the program.
        launcherPid = null;
        programPid = pid;
      }
    }
    switch (f[0]) {
      case 'P':
        programPid ??= pid;
        break;
      case 'X': {
        // `X <pid> <hexpath|-> <hex name of an anonymous file|->`
        const path = f[2] === '-' ? '' : hexText(f[2]);
        const anon = f[3] === '-' ? null : hexText(f[3]);
        if (path === null || (f[3] !== '-' && !anon)) {
          unparsed++;
          break;
        }
        // The kernel's name of an anonymous file, as strace's -y shows it too (without " (deleted)").
        const key = anon?.replace(/ \(deleted\)$/, '') ?? (path || '?');
        if (anon) anonymous.add(key);
        bump(executables, key);
        break;
      }
      case 'U':
        if (!f[2] || !f[3]) unparsed++;
        else bump(unreadable, f[2]);
        break;
      case 'Y':
        if (f[3] === 'e11') refusedForks++;
        else unparsed++;
        break;
      case 'L':
      case 'T': {
        const [nr, arch] = [int(f[2]), Number(f[3])];
        if (nr === null || !Number.isSafeInteger(arch)) {
          unparsed++;
          break;
        }
        const name = syscallNameOf(nr, arch);
        if (f[0] === 'L') bump(refused, name);
        else {
          const cur = privileged.get(name);
          if (cur) cur.count++;
          else privileged.set(name, { name, count: 1, outcome: 'trapped' });
        }
        break;
      }
      case 'F': {
        const child = int(f[2]);
        if (child === null || (f[3] !== 't' && f[3] !== 'p')) {
          unparsed++;
          break;
        }
        parent.set(child, pid);
        if (f[3] === 't') threads++;
        else {
          processes++;
          children.add(child);
        }
        break;
      }
      case 'S': {
        const target = f[3] === '-' ? null : int(f[3]);
        const sig = int(f[4]);
        if (sig === null || !f[2] || !f[5]) {
          unparsed++;
          break;
        }
        signalsSent.push({ targetPid: target, targetHostPid: null, signal: signalName(sig), syscall: f[2], result: resultOf(f[5]) });
        break;
      }
      case 'K': {
        const [domain, type, proto] = [int(f[2]), int(f[3]), int(f[4])];
        if (domain === null || type === null || proto === null || !f[5]) {
          unparsed++;
          break;
        }
        const family = familyOf(domain);
        const protocol = protocolOf(family, type, proto);
        const fd = int(f[5]);
        if (fd !== null) sockets.set(`${pid}:${fd}`, { family, protocol });
        if (family !== 'unix') networkAttempts.push({ syscall: 'socket', family, protocol, address: null, port: null, path: null, result: resultOf(f[5]) });
        break;
      }
      case 'N': {
        const fd = int(f[3]);
        const sa = decodeSockaddr(f[4] ?? '');
        if (fd === null || sa === null || !f[2] || !f[5]) {
          unparsed++;
          break;
        }
        networkAttempts.push({ syscall: f[2], ...sa, protocol: socketOf(pid, fd)?.protocol ?? null, result: resultOf(f[5]) });
        break;
      }
      case 'D': {
        const path = pathField(f[3])?.path ?? null;
        if (path === null || !f[2] || !f[4]) {
          unparsed++;
          break;
        }
        const p = posix.normalize(path);
        if (p.startsWith('/') && isDevicePath(p)) deviceAccess.push({ path: p, syscall: f[2], result: resultOf(f[4]) });
        break;
      }
      case 'A': {
        const at = pathField(f[4]);
        if (at === null || !f[2] || (f[3] !== 'r' && f[3] !== 'w') || !f[5]) {
          unparsed++;
          break;
        }
        fileAccess.push({ ...at, syscall: f[2], access: f[3] === 'w' ? 'write' : 'read', result: f[5] === '-' ? null : resultOf(f[5]) });
        break;
      }
      case 'E': {
        const code = f[2] === '-' ? null : int(f[2]);
        const sig = f[3] === '-' ? null : int(f[3]);
        if (pid === programPid) programEnd = { code, signal: sig === null ? null : signalName(sig) };
        break;
      }
      case 'Q':
        if (pid === programPid) programEnded = true;
        else if (!programEnded) endedBeforeProgram.add(pid);
        break;
      default:
        unparsed++;
    }
  }
  return {
    sideEffects: assembleSideEffects({
      bwrapPid,
      programPid,
      forks: processes,
      threads,
      refusedForks,
      executables,
      anonymous,
      outlivedProgram: programEnded ? [...children].filter((c) => !endedBeforeProgram.has(c)).length : 0,
      signalsSent,
      networkAttempts,
      privileged,
      deviceAccess,
      fileAccess,
      unreadable,
      refused,
      unparsed,
    }),
    programEnd,
  };
}
