// The seccomp filter of the `ns` lane: a classic BPF program handed to `bwrap --seccomp FD`.
//
// Why SECCOMP_RET_TRAP and not ERRNO: the runner observes the program with a ptrace tracer (the host
// tracer, native/tracer.c, or `strace -f --seccomp-bpf`), which stops on SECCOMP_RET_TRACE. Filters
// take the highest-precedence action (KILL > TRAP > ERRNO > USER_NOTIF > TRACE > LOG > ALLOW), so a
// syscall we answered with ERRNO would never reach the tracer and the attempt would be invisible. With
// TRAP the syscall is not executed, the kernel sends SIGSYS (si_code SYS_SECCOMP, si_syscall = the
// number) and the tracer sees that signal before the program does: every attempt is evidence, even if
// the program catches SIGSYS. With the host tracer, this filter also answers SECCOMP_RET_TRACE for the
// observed syscalls (`observe`), and traps clone(CLONE_UNTRACED), the one way to fork out of its sight. The one exception is clone3 -> ERRNO(ENOSYS): its flags live in user memory that BPF
// cannot read, so we refuse it in a way libc understands (glibc falls back to clone(), whose flags we
// can check). No clone3 can succeed, so nothing is hidden by not observing it.
// See docs/seccomp.md.

/** struct seccomp_data offsets (include/uapi/linux/seccomp.h). */
const OFF_NR = 0;
const OFF_ARCH = 4;
/** Low 32 bits of args[i] on a little-endian machine. */
const offArgLo = (i: number): number => 16 + 8 * i;
const offArgHi = (i: number): number => 20 + 8 * i;

// BPF opcodes (include/uapi/linux/filter.h).
const BPF_LD_W_ABS = 0x20;
const BPF_JEQ_K = 0x15;
const BPF_JGE_K = 0x35;
const BPF_JSET_K = 0x45;
const BPF_RET_K = 0x06;

export const SECCOMP_RET_KILL_PROCESS = 0x80000000;
export const SECCOMP_RET_TRAP = 0x00030000;
export const SECCOMP_RET_ERRNO = 0x00050000;
export const SECCOMP_RET_ALLOW = 0x7fff0000;
/** Stop for the attached tracer; with no tracer attached the kernel fails the call with ENOSYS. */
export const SECCOMP_RET_TRACE = 0x7ff00000;
const ENOSYS = 38;

export const AUDIT_ARCH_X86_64 = 0xc000003e;
export const AUDIT_ARCH_AARCH64 = 0xc00000b7;
/** x32 syscalls are x86_64 numbers with this bit set: a classic way around a filter. */
const X32_SYSCALL_BIT = 0x40000000;

/** CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET (CLONE_NEWTIME is clone3-only). */
export const CLONE_NEW_MASK = 0x7e020000;
/** A child created with CLONE_UNTRACED is not followed by a tracer: only kernel threads need it. */
const CLONE_UNTRACED = 0x00800000;
const TIOCSTI = 0x5412;
const TIOCLINUX = 0x541c;
/** personality() values a normal program may use: PER_LINUX, PER_LINUX32, UNAME26 combos, query. */
const PERSONALITY_ALLOWED = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];

/** The denied syscall families (all answered with SIGSYS), for docs and `airlock doctor`. */
export const DENIED_SYSCALLS = {
  mount: ['mount', 'umount2', 'pivot_root', 'chroot', 'move_mount', 'open_tree', 'fsopen', 'fsconfig', 'fsmount', 'fspick', 'mount_setattr'],
  tracing: ['ptrace', 'process_vm_readv', 'process_vm_writev', 'kcmp', 'clone(CLONE_UNTRACED)'],
  kernel_modules: ['init_module', 'finit_module', 'delete_module'],
  kexec: ['kexec_load', 'kexec_file_load'],
  bpf_perf: ['bpf', 'perf_event_open'],
  keyring: ['keyctl', 'add_key', 'request_key'],
  namespaces: ['unshare', 'setns', 'clone(CLONE_NEW*)'],
  host_state: ['clock_settime', 'clock_adjtime', 'adjtimex', 'settimeofday', 'sethostname', 'setdomainname', 'reboot', 'swapon', 'swapoff', 'acct', 'quotactl', 'quotactl_fd', 'iopl', 'ioperm', 'syslog', 'vhangup'],
  file_handles: ['open_by_handle_at', 'name_to_handle_at'],
  kernel_surface: ['userfaultfd', 'fanotify_init', 'lookup_dcookie', 'io_uring_setup', 'io_uring_enter', 'io_uring_register'],
  terminal_injection: ['ioctl(TIOCSTI)', 'ioctl(TIOCLINUX)'],
  personality: ['personality(other than PER_LINUX, PER_LINUX32, UNAME26, query)'],
} as const satisfies Record<string, readonly string[]>;

export type DeniedFamily = keyof typeof DENIED_SYSCALLS;

/** Syscalls refused with ERRNO instead of TRAP (not observed by strace; see the header comment). */
export const ERRNO_SYSCALLS = { clone3: 'ENOSYS' } as const;

interface ArchTable {
  audit: number;
  x32Check: boolean;
  /** Every plain-denied name (no argument check) that exists on this arch, with its number. */
  nr: Record<string, number>;
}

// Numbers from asm/unistd_64.h (x86_64) and asm-generic/unistd.h (aarch64). A name absent from an
// arch (iopl, ioperm on aarch64) does not exist there and needs no rule.
const X86_64: Record<string, number> = {
  mount: 165, umount2: 166, pivot_root: 155, chroot: 161, move_mount: 429, open_tree: 428, fsopen: 430,
  fsconfig: 431, fsmount: 432, fspick: 433, mount_setattr: 442,
  ptrace: 101, process_vm_readv: 310, process_vm_writev: 311, kcmp: 312,
  init_module: 175, finit_module: 313, delete_module: 176, kexec_load: 246, kexec_file_load: 320,
  bpf: 321, perf_event_open: 298, keyctl: 250, add_key: 248, request_key: 249,
  unshare: 272, setns: 308,
  clock_settime: 227, clock_adjtime: 305, adjtimex: 159, settimeofday: 164, sethostname: 170,
  setdomainname: 171, reboot: 169, swapon: 167, swapoff: 168, acct: 163, quotactl: 179, quotactl_fd: 443,
  iopl: 172, ioperm: 173, syslog: 103, vhangup: 153,
  open_by_handle_at: 304, name_to_handle_at: 303,
  userfaultfd: 323, fanotify_init: 300, lookup_dcookie: 212,
  io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
  // Obsolete entry points to the same powers.
  uselib: 134, create_module: 174, get_kernel_syms: 177, query_module: 178, nfsservctl: 180, _sysctl: 156,
};
const AARCH64: Record<string, number> = {
  mount: 40, umount2: 39, pivot_root: 41, chroot: 51, move_mount: 429, open_tree: 428, fsopen: 430,
  fsconfig: 431, fsmount: 432, fspick: 433, mount_setattr: 442,
  ptrace: 117, process_vm_readv: 270, process_vm_writev: 271, kcmp: 272,
  init_module: 105, finit_module: 273, delete_module: 106, kexec_load: 104, kexec_file_load: 294,
  bpf: 280, perf_event_open: 241, keyctl: 219, add_key: 217, request_key: 218,
  unshare: 97, setns: 268,
  clock_settime: 112, clock_adjtime: 266, adjtimex: 171, settimeofday: 170, sethostname: 161,
  setdomainname: 162, reboot: 142, swapon: 224, swapoff: 225, acct: 89, quotactl: 60, quotactl_fd: 443,
  syslog: 116, vhangup: 58,
  open_by_handle_at: 265, name_to_handle_at: 264,
  userfaultfd: 282, fanotify_init: 262, lookup_dcookie: 18,
  io_uring_setup: 425, io_uring_enter: 426, io_uring_register: 427,
  nfsservctl: 42,
};
/**
 * The syscalls the host's tracer observes (native/tracer.c classifies the same set), without clone
 * (special-cased) and sendto (traced only when it names an address).
 */
const OBSERVED: Record<'x86_64' | 'aarch64', Record<string, number>> = {
  x86_64: {
    execve: 59, execveat: 322, fork: 57, vfork: 58, kill: 62, tkill: 200, tgkill: 234, rt_sigqueueinfo: 129, rt_tgsigqueueinfo: 297,
    pidfd_send_signal: 424, socket: 41, connect: 42, bind: 49, sendmsg: 46, sendmmsg: 307, open: 2, creat: 85, mknod: 133,
    openat: 257, openat2: 437, mknodat: 259,
    // calls that change a path (reported when they write outside /out, /tmp and the scopes)
    mkdir: 83, rmdir: 84, link: 86, unlink: 87, symlink: 88, rename: 82, chmod: 90, chown: 92, lchown: 94, truncate: 76,
    mkdirat: 258, unlinkat: 263, linkat: 265, symlinkat: 266, renameat: 264, renameat2: 316, fchmodat: 268, fchownat: 260,
  },
  aarch64: {
    execve: 221, execveat: 281, kill: 129, tkill: 130, tgkill: 131, rt_sigqueueinfo: 138, rt_tgsigqueueinfo: 240,
    pidfd_send_signal: 424, socket: 198, connect: 203, bind: 200, sendmsg: 211, sendmmsg: 269, openat: 56, openat2: 437, mknodat: 33,
    truncate: 45, mkdirat: 34, unlinkat: 35, linkat: 37, symlinkat: 36, renameat: 38, renameat2: 276, fchmodat: 53, fchownat: 54,
  },
};
const SENDTO = { x86_64: 44, aarch64: 206 } as const;

const SPECIAL = {
  x86_64: { clone: 56, clone3: 435, ioctl: 16, personality: 135 },
  aarch64: { clone: 220, clone3: 435, ioctl: 29, personality: 92 },
} as const;

const ARCHES: Record<'x86_64' | 'aarch64', ArchTable> = {
  x86_64: { audit: AUDIT_ARCH_X86_64, x32Check: true, nr: X86_64 },
  aarch64: { audit: AUDIT_ARCH_AARCH64, x32Check: false, nr: AARCH64 },
};

/** Maps Node's `process.arch` and uname spellings to our table names; null when unsupported. */
export function normalizeArch(arch: string): 'x86_64' | 'aarch64' | null {
  if (arch === 'x64' || arch === 'x86_64' || arch === 'amd64') return 'x86_64';
  if (arch === 'arm64' || arch === 'aarch64') return 'aarch64';
  return null;
}

/** The syscall numbers the filter answers with SIGSYS unconditionally, by name (for tests/doctor). */
export function deniedSyscallNumbers(arch: string = process.arch): Record<string, number> {
  const a = normalizeArch(arch);
  if (a === null) throw new Error(`seccomp: unsupported architecture "${arch}" (supported: x86_64, aarch64)`);
  return { ...ARCHES[a].nr };
}

// ---- a tiny assembler with forward labels -------------------------------------------------------

type Insn =
  | { op: 'ld'; k: number }
  | { op: 'ret'; k: number }
  | { op: 'jmp'; cond: number; k: number; jt: string | null; jf: string | null }
  | { op: 'label'; name: string };

function assemble(prog: Insn[]): Buffer {
  const labels = new Map<string, number>();
  let pc = 0;
  for (const i of prog) {
    if (i.op === 'label') labels.set(i.name, pc);
    else pc++;
  }
  const out = Buffer.alloc(pc * 8);
  pc = 0;
  const rel = (target: string | null, at: number): number => {
    if (target === null) return 0; // fall through
    const dest = labels.get(target);
    if (dest === undefined) throw new Error(`seccomp: unknown label ${target}`);
    const off = dest - at - 1;
    // Classic BPF jumps are forward-only, 8-bit: a bug in this file, not a runtime condition.
    if (off < 0 || off > 255) throw new Error(`seccomp: jump to ${target} out of range (${off})`);
    return off;
  };
  for (const i of prog) {
    if (i.op === 'label') continue;
    const o = pc * 8;
    if (i.op === 'ld') {
      out.writeUInt16LE(BPF_LD_W_ABS, o);
      out.writeUInt32LE(i.k >>> 0, o + 4);
    } else if (i.op === 'ret') {
      out.writeUInt16LE(BPF_RET_K, o);
      out.writeUInt32LE(i.k >>> 0, o + 4);
    } else {
      out.writeUInt16LE(i.cond, o);
      out.writeUInt8(rel(i.jt, pc), o + 2);
      out.writeUInt8(rel(i.jf, pc), o + 3);
      out.writeUInt32LE(i.k >>> 0, o + 4);
    }
    pc++;
  }
  return out;
}

const ld = (k: number): Insn => ({ op: 'ld', k });
const ret = (k: number): Insn => ({ op: 'ret', k });
const label = (name: string): Insn => ({ op: 'label', name });
const jeq = (k: number, jt: string | null, jf: string | null = null): Insn => ({ op: 'jmp', cond: BPF_JEQ_K, k, jt, jf });
const jge = (k: number, jt: string | null, jf: string | null = null): Insn => ({ op: 'jmp', cond: BPF_JGE_K, k, jt, jf });
const jset = (k: number, jt: string | null, jf: string | null = null): Insn => ({ op: 'jmp', cond: BPF_JSET_K, k, jt, jf });

/**
 * Builds the filter for `arch` (Node's `process.arch` spelling or uname's; default: this host).
 * Throws for an unsupported architecture: running without the filter must be a decision, not an accident.
 * `observe`: the observed syscalls answer SECCOMP_RET_TRACE for the host's tracer (native/tracer.c);
 * only for runs it is attached to, since without a tracer those calls fail with ENOSYS.
 */
export function buildSeccompFilter(arch: string = process.arch, opts: { observe?: boolean } = {}): Buffer {
  const a = normalizeArch(arch);
  if (a === null) {
    throw new Error(`seccomp: unsupported architecture "${arch}": the ns lane has syscall tables for x86_64 and aarch64 only`);
  }
  const t = ARCHES[a];
  const sp = SPECIAL[a];
  const prog: Insn[] = [
    // A syscall made through another ABI (int 0x80 on x86_64 = i386 numbers) would dodge every rule.
    ld(OFF_ARCH),
    jeq(t.audit, null, 'trap'),
    ld(OFF_NR),
  ];
  if (t.x32Check) prog.push(jge(X32_SYSCALL_BIT, 'trap'));
  for (const nr of Object.values(t.nr)) prog.push(jeq(nr, 'trap'));
  const observe = opts.observe === true;
  if (observe) for (const nr of Object.values(OBSERVED[a])) prog.push(jeq(nr, 'trace'));
  prog.push(
    jeq(sp.clone, 'clone'),
    jeq(sp.clone3, 'enosys'),
    jeq(sp.ioctl, 'ioctl'),
    jeq(sp.personality, 'personality'),
  );
  if (observe) prog.push(jeq(SENDTO[a], 'sendto'));
  prog.push(
    ret(SECCOMP_RET_ALLOW),
    // clone(flags, ...): flags are argument 0 on both arches; the kernel uses their low 32 bits.
    label('clone'),
    ld(offArgLo(0)),
    jset(CLONE_NEW_MASK | CLONE_UNTRACED, 'trap'),
    ret(observe ? SECCOMP_RET_TRACE : SECCOMP_RET_ALLOW),
    // sendto(fd, buf, len, flags, dest_addr, addrlen): without an address there is nothing to record.
    label('sendto'),
    ld(offArgLo(4)),
    jeq(0, null, 'trace'),
    ld(offArgHi(4)),
    jeq(0, 'allow', 'trace'),
    // ioctl(fd, cmd): cmd is an unsigned int, so comparing the low word matches what the kernel sees.
    label('ioctl'),
    ld(offArgLo(1)),
    jeq(TIOCSTI, 'trap'),
    jeq(TIOCLINUX, 'trap'),
    ret(SECCOMP_RET_ALLOW),
    label('personality'),
    ld(offArgLo(0)),
    ...PERSONALITY_ALLOWED.map((k) => jeq(k, 'allow')),
    label('trap'),
    ret(SECCOMP_RET_TRAP),
    label('allow'),
    ret(SECCOMP_RET_ALLOW),
    label('enosys'),
    ret(SECCOMP_RET_ERRNO | ENOSYS),
    label('trace'),
    ret(observe ? SECCOMP_RET_TRACE : SECCOMP_RET_ALLOW),
  );
  return assemble(prog);
}

/** The name of a syscall number this filter traps on `arch` (denied or argument-checked), else null. */
export function trappedSyscallName(nr: number, arch: string = process.arch): string | null {
  const a = normalizeArch(arch);
  if (a === null) return null;
  for (const table of [ARCHES[a].nr, SPECIAL[a]] as Record<string, number>[]) {
    for (const [name, n] of Object.entries(table)) if (n === nr) return name;
  }
  return null;
}
