// The seccomp filter of the `ns` lane: a classic BPF program handed to `bwrap --seccomp FD`.
//
// An allowlist: the syscall families ordinary programs need (ALLOWED_SYSCALLS) run; the privileged
// families (DENIED_SYSCALLS) are trapped; anything else, including every syscall a later kernel adds,
// is refused and reported. See docs/seccomp.md for the list and how to extend it.
//
// Why SECCOMP_RET_TRAP for the privileged families and not ERRNO: the runner observes the program
// with a ptrace tracer (the host tracer, native/tracer.c, or `strace -f --seccomp-bpf`), which stops
// on SECCOMP_RET_TRACE. Filters take the highest-precedence action (KILL > TRAP > ERRNO > USER_NOTIF
// > TRACE > LOG > ALLOW), so a syscall we answered with ERRNO would never reach the tracer and the
// attempt would be invisible. With TRAP the syscall is not executed, the kernel sends SIGSYS (si_code
// SYS_SECCOMP, si_syscall = the number) and the tracer sees that signal before the program does.
//
// A syscall off the list (`unlisted`): with the host tracer (`observe`), SECCOMP_RET_TRACE with
// REFUSE_DATA: the tracer reports it and skips it, so the program sees ENOSYS and falls back as libc
// does for a syscall its kernel lacks. Without the host tracer, SIGSYS (strace cannot skip a call).
// Without any tracer attached, SECCOMP_RET_TRACE itself fails the call with ENOSYS: a lost tracer can
// hide nothing.
//
// With the host tracer this filter also answers SECCOMP_RET_TRACE for the observed syscalls, and traps
// clone(CLONE_UNTRACED), the one way to fork out of its sight. clone3 -> ERRNO(ENOSYS): its flags live
// in user memory that BPF cannot read; glibc falls back to clone(), whose flags we can check.
import { AARCH64_SYSCALLS, X86_64_SYSCALLS } from './syscall-numbers.js';

/** struct seccomp_data offsets (include/uapi/linux/seccomp.h). */
const OFF_NR = 0;
const OFF_ARCH = 4;
/** Low 32 bits of args[i] on a little-endian machine. */
const offArgLo = (i: number): number => 16 + 8 * i;
const offArgHi = (i: number): number => 20 + 8 * i;

// BPF opcodes (include/uapi/linux/filter.h).
const BPF_LD_W_ABS = 0x20;
const BPF_JA = 0x05;
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
/** SECCOMP_RET_DATA of a TRACE that asks the host tracer to refuse the call (native/tracer.c). */
export const REFUSE_DATA = 1;
const ENOSYS = 38;

export const AUDIT_ARCH_X86_64 = 0xc000003e;
export const AUDIT_ARCH_AARCH64 = 0xc00000b7;
/** x32 syscalls are x86_64 numbers with this bit set: a classic way around a filter. */
const X32_SYSCALL_BIT = 0x40000000;

/** CLONE_NEWNS|NEWCGROUP|NEWUTS|NEWIPC|NEWUSER|NEWPID|NEWNET (CLONE_NEWTIME is clone3-only). */
export const CLONE_NEW_MASK = 0x7e020000;
/** A child created with CLONE_UNTRACED is not followed by a tracer: only kernel threads need it. */
const CLONE_UNTRACED = 0x00800000;
/** A new thread of the caller's process (the Monty worker's profile allows clone for nothing else). */
const CLONE_THREAD = 0x00010000;
const TIOCSTI = 0x5412;
const TIOCLINUX = 0x541c;
/**
 * ioctl commands that change a file's inode flags, version, extended attributes or encryption policy
 * (chattr's immutable and append-only, lsattr's project), which take a descriptor open for reading:
 * with the host tracer they stop and are judged as changes through a descriptor. FS_IOC_SETFLAGS and
 * FS_IOC_SETVERSION (long and int sizes), FS_IOC_FSSETXATTR, FS_IOC_SET_ENCRYPTION_POLICY.
 */
const INODE_IOCTLS = [0x40086602, 0x40046602, 0x40087602, 0x40047602, 0x401c5820, 0x800c6613];
/**
 * socket() domains the sandbox may create: AF_UNIX, AF_INET, AF_INET6, AF_NETLINK, whose sockets
 * live in the sandbox's own network namespace (or its mount tree). Any other is trapped: AF_VSOCK, for
 * one, is not separated by a network namespace (it reaches the VM's host and shares its ports).
 */
const SOCKET_DOMAINS = [1, 2, 10, 16];
/** personality() values a normal program may use: PER_LINUX, PER_LINUX32, UNAME26 combos, query. */
const PERSONALITY_ALLOWED = [0x0, 0x8, 0x20000, 0x20008, 0xffffffff];

/**
 * The allowed syscall families: what python3, node, sh and coreutils, git, gcc (cc1, as, ld), make,
 * tar, gzip and perl call (measured with `strace -f` on each), widened to whole families so a program
 * that uses a neighbour of what those used still works. A name an arch lacks is skipped there.
 * clone, ioctl and personality are allowed with argument checks (below), clone3 is ENOSYS.
 */
export const ALLOWED_SYSCALLS = {
  file_io: ['read', 'write', 'pread64', 'pwrite64', 'readv', 'writev', 'preadv', 'pwritev', 'preadv2', 'pwritev2', 'lseek', 'sendfile', 'copy_file_range', 'splice', 'tee', 'vmsplice',
    'fsync', 'fdatasync', 'sync', 'syncfs', 'sync_file_range', 'fallocate', 'fadvise64', 'readahead', 'flock', 'ftruncate',
    'io_setup', 'io_destroy', 'io_submit', 'io_cancel', 'io_getevents', 'io_pgetevents'],
  descriptors: ['open', 'openat', 'openat2', 'creat', 'close', 'close_range', 'dup', 'dup2', 'dup3', 'fcntl', 'pipe', 'pipe2', 'memfd_create'],
  file_metadata: ['stat', 'fstat', 'lstat', 'newfstatat', 'statx', 'access', 'faccessat', 'faccessat2', 'readlink', 'readlinkat', 'getdents', 'getdents64', 'getcwd', 'chdir', 'fchdir',
    'statfs', 'fstatfs', 'umask', 'utime', 'utimes', 'futimesat', 'utimensat', 'chmod', 'fchmod', 'fchmodat', 'fchmodat2', 'chown', 'fchown', 'lchown', 'fchownat'],
  path_changes: ['mkdir', 'mkdirat', 'rmdir', 'unlink', 'unlinkat', 'rename', 'renameat', 'renameat2', 'link', 'linkat', 'symlink', 'symlinkat', 'truncate', 'mknod', 'mknodat'],
  xattr: ['getxattr', 'lgetxattr', 'fgetxattr', 'listxattr', 'llistxattr', 'flistxattr', 'setxattr', 'lsetxattr', 'fsetxattr', 'removexattr', 'lremovexattr', 'fremovexattr',
    'getxattrat', 'listxattrat', 'setxattrat', 'removexattrat'],
  memory: ['brk', 'mmap', 'munmap', 'mremap', 'mprotect', 'madvise', 'msync', 'mincore', 'mlock', 'mlock2', 'munlock', 'mlockall', 'munlockall', 'pkey_alloc', 'pkey_free', 'pkey_mprotect',
    'mbind', 'get_mempolicy', 'set_mempolicy', 'set_mempolicy_home_node', 'migrate_pages', 'move_pages', 'membarrier', 'mseal', 'map_shadow_stack'],
  processes: ['fork', 'vfork', 'execve', 'execveat', 'exit', 'exit_group', 'wait4', 'waitid', 'pidfd_open', 'getpid', 'getppid', 'gettid', 'getpgid', 'setpgid', 'getpgrp', 'getsid', 'setsid',
    'set_tid_address', 'prctl', 'arch_prctl'],
  signals: ['rt_sigaction', 'rt_sigprocmask', 'rt_sigreturn', 'rt_sigpending', 'rt_sigtimedwait', 'rt_sigsuspend', 'rt_sigqueueinfo', 'rt_tgsigqueueinfo', 'sigaltstack', 'kill', 'tkill', 'tgkill',
    'pidfd_send_signal', 'signalfd', 'signalfd4', 'pause', 'restart_syscall'],
  time: ['nanosleep', 'clock_nanosleep', 'clock_gettime', 'clock_getres', 'gettimeofday', 'time', 'times', 'alarm', 'getitimer', 'setitimer', 'timer_create', 'timer_settime', 'timer_gettime',
    'timer_getoverrun', 'timer_delete', 'timerfd_create', 'timerfd_settime', 'timerfd_gettime'],
  threads: ['futex', 'futex_waitv', 'futex_wake', 'futex_wait', 'futex_requeue', 'set_robust_list', 'get_robust_list', 'rseq', 'sched_yield', 'sched_getaffinity', 'sched_setaffinity',
    'sched_getparam', 'sched_setparam', 'sched_getscheduler', 'sched_setscheduler', 'sched_get_priority_max', 'sched_get_priority_min', 'sched_rr_get_interval', 'sched_getattr', 'sched_setattr',
    'getcpu', 'getpriority', 'setpriority', 'ioprio_get', 'ioprio_set'],
  events: ['poll', 'ppoll', 'select', 'pselect6', 'epoll_create', 'epoll_create1', 'epoll_ctl', 'epoll_wait', 'epoll_pwait', 'epoll_pwait2', 'eventfd', 'eventfd2',
    'inotify_init', 'inotify_init1', 'inotify_add_watch', 'inotify_rm_watch'],
  sockets: ['socket', 'socketpair', 'connect', 'bind', 'listen', 'accept', 'accept4', 'getsockname', 'getpeername', 'setsockopt', 'getsockopt', 'shutdown', 'sendto', 'recvfrom', 'sendmsg',
    'recvmsg', 'sendmmsg', 'recvmmsg'],
  // The sandbox has its own IPC namespace (--unshare-ipc).
  ipc: ['shmget', 'shmat', 'shmdt', 'shmctl', 'semget', 'semop', 'semtimedop', 'semctl', 'msgget', 'msgsnd', 'msgrcv', 'msgctl', 'mq_open', 'mq_unlink', 'mq_timedsend', 'mq_timedreceive',
    'mq_notify', 'mq_getsetattr'],
  // The sandbox's user namespace maps one uid and has no capabilities: these change nothing outside it.
  identity: ['getuid', 'geteuid', 'getgid', 'getegid', 'getresuid', 'getresgid', 'getgroups', 'setuid', 'setgid', 'setreuid', 'setregid', 'setresuid', 'setresgid', 'setgroups', 'setfsuid',
    'setfsgid', 'capget', 'capset'],
  // seccomp: a filter the program adds can only restrict further (the kernel takes the strictest answer).
  system_info: ['uname', 'sysinfo', 'getrusage', 'getrlimit', 'setrlimit', 'prlimit64', 'getrandom', 'seccomp'],
} as const satisfies Record<string, readonly string[]>;

/**
 * The Monty worker's allowlist (src/sandbox/lanes/monty-sandbox.ts): what node running
 * @pydantic/monty calls (measured with `strace -f` on the worker serving the Monty tests' programs:
 * start-up, prints, /in and /out, memory and time limits, exceptions, V8's GC and threads), a strict
 * subset of ALLOWED_SYSCALLS. Nothing else of the worker's is needed, so nothing else runs even if the
 * interpreter were escaped: no socket at all, no fork and no new process (clone is allowed for threads
 * only), no exec but bwrap's own start of node (execve cannot be told apart in BPF), no SysV/POSIX IPC,
 * no ownership, link or device-node changes, no AIO. Anything off it is trapped (SIGSYS: the worker dies
 * and the run says so).
 */
export const MONTY_WORKER_PROFILE = {
  summary: 'the Monty worker allowlist (no sockets, no fork or new process, no exec after start-up, no IPC, no chown, links or device nodes; clone for threads only): off-list calls are trapped (SIGSYS)',
  allowed: [
    'read', 'write', 'pread64', 'pwrite64', 'readv', 'writev', 'preadv', 'pwritev', 'preadv2', 'pwritev2', 'lseek', 'fsync', 'fdatasync', 'ftruncate', 'fadvise64',
    'open', 'openat', 'close', 'close_range', 'dup', 'dup2', 'dup3', 'fcntl', 'pipe2', 'eventfd2',
    'stat', 'fstat', 'lstat', 'newfstatat', 'statx', 'access', 'faccessat', 'faccessat2', 'readlink', 'readlinkat', 'getdents64', 'getcwd', 'chdir', 'statfs', 'fstatfs', 'umask',
    'chmod', 'fchmod', 'fchmodat', 'utimensat',
    'mkdir', 'mkdirat', 'rmdir', 'unlink', 'unlinkat', 'rename', 'renameat', 'renameat2', 'truncate',
    'brk', 'mmap', 'munmap', 'mremap', 'mprotect', 'madvise', 'mincore', 'membarrier', 'pkey_alloc', 'pkey_free', 'pkey_mprotect',
    // bwrap's init (pid 1 of the worker's namespace) runs under the filter too, and reaps with wait4.
    'execve', 'exit', 'exit_group', 'wait4', 'waitid', 'getpid', 'getppid', 'gettid', 'set_tid_address', 'prctl', 'arch_prctl',
    'rt_sigaction', 'rt_sigprocmask', 'rt_sigreturn', 'rt_sigpending', 'rt_sigtimedwait', 'sigaltstack', 'kill', 'tkill', 'tgkill', 'restart_syscall',
    'nanosleep', 'clock_nanosleep', 'clock_gettime', 'clock_getres', 'gettimeofday', 'time', 'times',
    'futex', 'futex_waitv', 'futex_wake', 'futex_wait', 'futex_requeue', 'set_robust_list', 'get_robust_list', 'rseq', 'sched_yield', 'sched_getaffinity',
    'sched_getparam', 'sched_getscheduler', 'sched_get_priority_max', 'sched_get_priority_min', 'getcpu', 'getpriority',
    'poll', 'ppoll', 'epoll_create', 'epoll_create1', 'epoll_ctl', 'epoll_wait', 'epoll_pwait', 'epoll_pwait2',
    'getuid', 'geteuid', 'getgid', 'getegid', 'getresuid', 'getresgid', 'getgroups', 'capget',
    'uname', 'sysinfo', 'getrusage', 'getrlimit', 'prlimit64', 'getrandom',
    // libuv asks what its stdio descriptors are (pipes here): harmless on a descriptor, and socket() itself is trapped.
    'getsockname', 'getsockopt',
  ],
} as const;

/** The denied syscall families (all answered with SIGSYS), for docs and `airlock doctor`. */
export const DENIED_SYSCALLS = {
  mount: ['mount', 'umount2', 'pivot_root', 'chroot', 'move_mount', 'open_tree', 'open_tree_attr', 'fsopen', 'fsconfig', 'fsmount', 'fspick', 'mount_setattr', 'statmount', 'listmount'],
  tracing: ['ptrace', 'process_vm_readv', 'process_vm_writev', 'kcmp', 'clone(CLONE_UNTRACED)'],
  // Memory no other process (the host tracer included) can read: a program that keeps its paths and
  // addresses there would blind the observer.
  secret_memory: ['memfd_secret'],
  kernel_modules: ['init_module', 'finit_module', 'delete_module'],
  kexec: ['kexec_load', 'kexec_file_load'],
  bpf_perf: ['bpf', 'perf_event_open'],
  keyring: ['keyctl', 'add_key', 'request_key'],
  namespaces: ['unshare', 'setns', 'clone(CLONE_NEW*)', 'socket(other than AF_UNIX, AF_INET, AF_INET6, AF_NETLINK: e.g. AF_VSOCK, which no network namespace confines)'],
  host_state: ['clock_settime', 'clock_adjtime', 'adjtimex', 'settimeofday', 'sethostname', 'setdomainname', 'reboot', 'swapon', 'swapoff', 'acct', 'quotactl', 'quotactl_fd', 'iopl', 'ioperm', 'syslog', 'vhangup'],
  file_handles: ['open_by_handle_at', 'name_to_handle_at'],
  kernel_surface: ['userfaultfd', 'fanotify_init', 'lookup_dcookie', 'io_uring_setup', 'io_uring_enter', 'io_uring_register'],
  terminal_injection: ['ioctl(TIOCSTI)', 'ioctl(TIOCLINUX)'],
  personality: ['personality(other than PER_LINUX, PER_LINUX32, UNAME26, query)'],
} as const satisfies Record<string, readonly string[]>;

export type DeniedFamily = keyof typeof DENIED_SYSCALLS;

/** Obsolete entry points to privileged powers, trapped too (not a family of their own). */
const OBSOLETE_DENIED = ['uselib', 'create_module', 'get_kernel_syms', 'query_module', 'nfsservctl', '_sysctl'];

/** Syscalls refused with ERRNO instead of TRAP (not observed by strace; see the header comment). */
export const ERRNO_SYSCALLS = { clone3: 'ENOSYS' } as const;
/**
 * Refused with ENOSYS in the filter without `observe` only: strace (the observer then) cannot trace
 * them by name, and libc falls back to a call it can (fchmodat2 -> fchmodat; the *xattrat calls of
 * Linux 6.13 have the older setxattr family beside them).
 */
const UNTRACEABLE_BY_STRACE = ['fchmodat2', 'setxattrat', 'removexattrat'];

/**
 * The syscalls the host's tracer observes (native/tracer.c classifies the same set), without clone
 * (special-cased) and sendto (traced only when it names an address).
 */
const OBSERVED = ['execve', 'execveat', 'fork', 'vfork', 'kill', 'tkill', 'tgkill', 'rt_sigqueueinfo', 'rt_tgsigqueueinfo', 'pidfd_send_signal', 'socket', 'connect', 'bind', 'sendmsg', 'sendmmsg',
  'open', 'creat', 'mknod', 'openat', 'openat2', 'mknodat',
  // calls that change a path (reported when they write outside /out, /tmp, /dev/shm and the scopes)
  'mkdir', 'rmdir', 'link', 'unlink', 'symlink', 'rename', 'chmod', 'chown', 'lchown', 'truncate',
  'mkdirat', 'unlinkat', 'linkat', 'symlinkat', 'renameat', 'renameat2', 'fchmodat', 'fchmodat2', 'fchownat',
  'utime', 'utimes', 'futimesat', 'utimensat', 'setxattr', 'lsetxattr', 'removexattr', 'lremovexattr', 'setxattrat', 'removexattrat',
  // ... and calls that change what a descriptor refers to (utimensat and futimesat without a path too):
  // judged by the file's name. ftruncate and fallocate need a descriptor open for writing, whose open is.
  'fchmod', 'fchown', 'fsetxattr', 'fremovexattr'];
/** Observed only when the named argument (a pointer) is set: sendto without an address has nothing to record. */
const OBSERVED_WITH_ARG: Readonly<Record<string, number>> = { sendto: 4 };

type Arch = 'x86_64' | 'aarch64';
const ARCHES: Record<Arch, { audit: number; x32Check: boolean; nr: Readonly<Record<string, number>> }> = {
  x86_64: { audit: AUDIT_ARCH_X86_64, x32Check: true, nr: X86_64_SYSCALLS },
  aarch64: { audit: AUDIT_ARCH_AARCH64, x32Check: false, nr: AARCH64_SYSCALLS },
};

/** Maps Node's `process.arch` and uname spellings to our table names; null when unsupported. */
export function normalizeArch(arch: string): Arch | null {
  if (arch === 'x64' || arch === 'x86_64' || arch === 'amd64') return 'x86_64';
  if (arch === 'arm64' || arch === 'aarch64') return 'aarch64';
  return null;
}

function archOf(arch: string): Arch {
  const a = normalizeArch(arch);
  if (a === null) throw new Error(`seccomp: unsupported architecture "${arch}": the ns lane has syscall tables for x86_64 and aarch64 only`);
  return a;
}

/** Numbers of the plain names in `names` that exist on `arch` (names with an argument check are skipped). */
function numbers(a: Arch, names: Iterable<string>): Map<string, number> {
  const out = new Map<string, number>();
  for (const n of names) {
    const nr = ARCHES[a].nr[n];
    if (nr !== undefined) out.set(n, nr);
  }
  return out;
}

/** The syscall numbers the filter answers with SIGSYS unconditionally, by name (for tests/doctor). */
export function deniedSyscallNumbers(arch: string = process.arch): Record<string, number> {
  return Object.fromEntries(numbers(archOf(arch), [...Object.values(DENIED_SYSCALLS).flat(), ...OBSOLETE_DENIED]));
}

/** The syscall numbers the filter lets run (some only after an argument check), by name. */
export function allowedSyscallNumbers(arch: string = process.arch): Record<string, number> {
  return Object.fromEntries(numbers(archOf(arch), Object.values(ALLOWED_SYSCALLS).flat()));
}

/** The name of a syscall number on `arch` (any syscall this table knows), else null. */
export function syscallName(nr: number, arch: string = process.arch): string | null {
  const a = normalizeArch(arch);
  if (a === null) return null;
  for (const [name, n] of Object.entries(ARCHES[a].nr)) if (n === nr) return name;
  return null;
}

/** True when `name` is one of the denied families' syscalls or an argument-checked one (trapped by the filter). */
export function isTrappedName(name: string): boolean {
  return DENIED_NAMES.has(name) || name === 'clone' || name === 'ioctl' || name === 'personality' || name === 'socket';
}
const DENIED_NAMES: ReadonlySet<string> = new Set([...Object.values(DENIED_SYSCALLS).flat(), ...OBSOLETE_DENIED].filter((n) => /^[a-z_0-9]+$/.test(n)));

/** True when `name` is on the allowlist (some only after an argument check). */
export function isAllowedName(name: string): boolean {
  return ALLOWED_NAMES.has(name);
}
const ALLOWED_NAMES: ReadonlySet<string> = new Set(Object.values(ALLOWED_SYSCALLS).flat());

// ---- a tiny assembler with forward labels -------------------------------------------------------

type Insn =
  | { op: 'ld'; k: number }
  | { op: 'ret'; k: number }
  | { op: 'ja'; target: string }
  | { op: 'jmp'; cond: number; k: number; jt: string | null; jf: string | null }
  | { op: 'label'; name: string };

function assemble(prog: Insn[]): Buffer {
  const labels = new Map<string, number>();
  let pc = 0;
  for (const i of prog) {
    if (i.op === 'label') {
      if (labels.has(i.name)) throw new Error(`seccomp: label ${i.name} defined twice`);
      labels.set(i.name, pc);
    } else pc++;
  }
  const out = Buffer.alloc(pc * 8);
  pc = 0;
  const rel = (target: string | null, at: number, max: number): number => {
    if (target === null) return 0; // fall through
    const dest = labels.get(target);
    if (dest === undefined) throw new Error(`seccomp: unknown label ${target}`);
    const off = dest - at - 1;
    // Classic BPF jumps are forward-only (conditional ones 8-bit): a bug in this file, not a runtime condition.
    if (off < 0 || off > max) throw new Error(`seccomp: jump to ${target} out of range (${off})`);
    return off;
  };
  for (const i of prog) {
    if (i.op === 'label') continue;
    const o = pc * 8;
    if (i.op === 'ld' || i.op === 'ret') {
      out.writeUInt16LE(i.op === 'ld' ? BPF_LD_W_ABS : BPF_RET_K, o);
      out.writeUInt32LE(i.k >>> 0, o + 4);
    } else if (i.op === 'ja') {
      out.writeUInt16LE(BPF_JA, o);
      out.writeUInt32LE(rel(i.target, pc, 0xffff), o + 4);
    } else {
      out.writeUInt16LE(i.cond, o);
      out.writeUInt8(rel(i.jt, pc, 255), o + 2);
      out.writeUInt8(rel(i.jf, pc, 255), o + 3);
      out.writeUInt32LE(i.k >>> 0, o + 4);
    }
    pc++;
  }
  return out;
}

const ld = (k: number): Insn => ({ op: 'ld', k });
const ret = (k: number): Insn => ({ op: 'ret', k });
const ja = (target: string): Insn => ({ op: 'ja', target });
const label = (name: string): Insn => ({ op: 'label', name });
const jeq = (k: number, jt: string | null, jf: string | null = null): Insn => ({ op: 'jmp', cond: BPF_JEQ_K, k, jt, jf });
const jge = (k: number, jt: string | null, jf: string | null = null): Insn => ({ op: 'jmp', cond: BPF_JGE_K, k, jt, jf });
const jset = (k: number, jt: string | null, jf: string | null = null): Insn => ({ op: 'jmp', cond: BPF_JSET_K, k, jt, jf });

/**
 * `nr in set ? goto hit : fall through`, as a search tree over the set's runs of consecutive numbers (A
 * holds the number). Leaves test a few runs with short conditional jumps; every longer jump is a `ja`
 * (32-bit offset), so the program stays valid however long the list grows.
 */
function membership(nrs: readonly number[], hit: string, id: () => string): Insn[] {
  const sorted = [...new Set(nrs)].sort((x, y) => x - y);
  const runs: [number, number][] = [];
  for (const n of sorted) {
    const last = runs[runs.length - 1];
    if (last && last[1] === n - 1) last[1] = n;
    else runs.push([n, n]);
  }
  const miss = id();
  const tree = (rs: [number, number][]): Insn[] => {
    if (rs.length <= 6) {
      const found = id();
      const out: Insn[] = [];
      for (const [lo, hi] of rs) {
        const next = id();
        if (lo === hi) out.push(jeq(lo, found));
        else out.push(jge(lo, null, next), jge(hi + 1, next, found), label(next));
      }
      return [...out, ja(miss), label(found), ja(hit)];
    }
    const mid = rs.length >> 1;
    const right = id();
    return [jge(rs[mid]![0], null, 'L'.concat(right)), ja(right), label('L'.concat(right)), ...tree(rs.slice(0, mid)), label(right), ...tree(rs.slice(mid))];
  };
  return [...tree(runs), label(miss)];
}

/**
 * Builds the filter for `arch` (Node's `process.arch` spelling or uname's; default: this host).
 * Throws for an unsupported architecture: running without the filter must be a decision, not an accident.
 * `observe`: the observed syscalls answer SECCOMP_RET_TRACE for the host's tracer (native/tracer.c),
 * and a syscall off the list is handed to it to refuse (ENOSYS) and report; only for runs it is
 * attached to, since without a tracer those calls fail with ENOSYS.
 */
export function buildSeccompFilter(arch: string = process.arch, opts: { observe?: boolean; profile?: 'program' | 'monty-worker' } = {}): Buffer {
  const a = archOf(arch);
  const t = ARCHES[a];
  const worker = opts.profile === 'monty-worker';
  // The worker is never traced: its filter has no TRACE answers.
  const observe = opts.observe === true && !worker;
  const allowed: ReadonlySet<string> = worker ? new Set(MONTY_WORKER_PROFILE.allowed) : ALLOWED_NAMES;
  const nr = (name: string): number => t.nr[name] as number;
  let n = 0;
  const id = (): string => `l${n++}`;
  const trace = observe ? SECCOMP_RET_TRACE : SECCOMP_RET_ALLOW;
  /** `if (nr == k) { body }` where body always returns. */
  const when = (k: number, body: Insn[]): Insn[] => {
    const skip = id();
    return [jeq(k, null, skip), ...body, label(skip)];
  };
  const prog: Insn[] = [
    // A syscall made through another ABI (int 0x80 on x86_64 = i386 numbers) would dodge every rule.
    ld(OFF_ARCH),
    jeq(t.audit, 'native'),
    ret(SECCOMP_RET_TRAP),
    label('native'),
    ld(OFF_NR),
  ];
  if (t.x32Check) prog.push(jge(X32_SYSCALL_BIT, 'trap0'), ja('nox32'), label('trap0'), ret(SECCOMP_RET_TRAP), label('nox32'));
  // socket(domain, ...): before the observed set, which holds socket too; the kernel reads domain as an int.
  if (allowed.has('socket')) prog.push(...when(nr('socket'), [ld(offArgLo(0)), ...SOCKET_DOMAINS.map((k) => jeq(k, 'sockdomain')), ret(SECCOMP_RET_TRAP), label('sockdomain'), ret(trace)]));
  if (observe) prog.push(...membership([...numbers(a, OBSERVED).values()], 'trace', id), ja('special'), label('trace'), ret(SECCOMP_RET_TRACE), label('special'));
  // clone(flags, ...): flags are argument 0 on both arches; the kernel uses their low 32 bits.
  prog.push(
    ...when(nr('clone'), [
      ld(offArgLo(0)),
      jset(CLONE_NEW_MASK | CLONE_UNTRACED, 'trap1'),
      ...(worker ? [jset(CLONE_THREAD, null, 'trap1')] : []),
      ret(trace),
      label('trap1'),
      ret(SECCOMP_RET_TRAP),
    ]),
  );
  for (const name of ['clone3', ...(observe ? [] : UNTRACEABLE_BY_STRACE)]) prog.push(...when(nr(name), [ret(SECCOMP_RET_ERRNO | ENOSYS)]));
  // ioctl(fd, cmd): cmd is an unsigned int, so comparing the low word matches what the kernel sees.
  const inodeIoctls = observe ? INODE_IOCTLS : [];
  prog.push(
    ...when(nr('ioctl'), [
      ld(offArgLo(1)),
      jeq(TIOCSTI, 'trap2'),
      jeq(TIOCLINUX, 'trap2'),
      ...inodeIoctls.map((k) => jeq(k, 'trace2')),
      ret(SECCOMP_RET_ALLOW),
      label('trap2'),
      ret(SECCOMP_RET_TRAP),
      ...(observe ? [label('trace2'), ret(SECCOMP_RET_TRACE)] : []),
    ]),
  );
  if (!worker) prog.push(...when(nr('personality'), [ld(offArgLo(0)), ...PERSONALITY_ALLOWED.map((k) => jeq(k, 'allow3')), ret(SECCOMP_RET_TRAP), label('allow3'), ret(SECCOMP_RET_ALLOW)]));
  if (observe) {
    for (const [name, arg] of Object.entries(OBSERVED_WITH_ARG)) {
      if (t.nr[name] === undefined) continue;
      const traced = id();
      prog.push(...when(nr(name), [ld(offArgLo(arg)), jeq(0, null, traced), ld(offArgHi(arg)), jeq(0, null, traced), ret(SECCOMP_RET_ALLOW), label(traced), ret(SECCOMP_RET_TRACE)]));
    }
  }
  prog.push(
    ...membership([...numbers(a, allowed).values()], 'allow', id),
    // Off the list: a privileged family is trapped; anything else is refused and reported.
    ...membership([...numbers(a, DENIED_NAMES).values()], 'trap', id),
    ret(observe ? SECCOMP_RET_TRACE | REFUSE_DATA : SECCOMP_RET_TRAP),
    label('allow'),
    ret(SECCOMP_RET_ALLOW),
    label('trap'),
    ret(SECCOMP_RET_TRAP),
  );
  return assemble(prog);
}
