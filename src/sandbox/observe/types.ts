// Shared types of the host-side observation (strace log and filesystem diff).
// Everything here is measured by the host, outside the sandbox.

export interface ExecutableCount {
  /** Path given to a successful execve/execveat, as the program saw it (inside the sandbox); for an
   *  anonymous file, the kernel's name of it (`/memfd:name (deleted)`). */
  path: string;
  count: number;
  /** The file had no name in any filesystem when it was run (memfd, O_TMPFILE, deleted): code nobody can look at. */
  anonymous?: true;
}

export interface ProcessesSpawned {
  /** Processes that ran the sandboxed program's code, the program's first process included (threads excluded). */
  count: number;
  /** Threads created by sandboxed processes (clone with CLONE_THREAD). */
  threads: number;
  executables: ExecutableCount[];
  /** Processes still running when the program's first process ended (daemons, background jobs): the host killed them. */
  outlivedProgram: number;
  /**
   * Forks and clones the kernel refused with EAGAIN: a process limit reached. The host tracer counts
   * them only where RLIMIT_NPROC is the run's processes limit (no pids cgroup, whose own count says).
   */
  refusedForks: number;
}

export interface SignalSent {
  /** The pid as the program passed it (inside the sandbox's pid namespace; 0 or negative for groups; null for pidfd_send_signal). */
  targetPid: number | null;
  /** The host pid strace translated it to, when it could. */
  targetHostPid: number | null;
  /** Signal name as strace printed it (SIGKILL, 0 for a liveness probe, or a number). */
  signal: string;
  syscall: string;
  /** 'ok' or the errno name (EPERM, ESRCH...). */
  result: string;
}

export type NetFamily = 'inet' | 'inet6' | 'unix' | 'netlink' | 'other';

export interface NetworkAttempt {
  syscall: string;
  family: NetFamily;
  /** tcp, udp, raw, icmp, seqpacket, or the socket type/protocol as printed; null when unknown. */
  protocol: string | null;
  address: string | null;
  port: number | null;
  /** Unix socket path (abstract sockets start with '@'). */
  path: string | null;
  result: string;
}

/** trapped: our seccomp filter answered SIGSYS; denied: the kernel refused (EPERM/EACCES/ENOSYS);
 *  failed: another error; succeeded: the call went through (a sandbox failure the judge must block). */
export type PrivilegedOutcome = 'trapped' | 'denied' | 'failed' | 'succeeded';

export interface PrivilegedSyscall {
  name: string;
  count: number;
  outcome: PrivilegedOutcome;
}

export interface DeviceAccess {
  path: string;
  syscall: string;
  result: string;
}

export interface FileAccess {
  /** Where the call led: links resolved in the sandbox's view (host tracer; strace: as written). */
  path: string;
  /** The path as the program wrote it, when links made it lead elsewhere. */
  asWritten?: string;
  syscall: string;
  access: 'read' | 'write';
  /** 'ok' or the errno name; null for a read, reported when attempted (the host knows what its root holds). */
  result: string | null;
}

/** An observed syscall whose argument (path, socket address, message header) the host could not read:
 *  what it did is unknown, so the attempt itself is the finding. */
export interface UnreadableSyscall {
  syscall: string;
  count: number;
}

/** A syscall off the seccomp filter's allowlist: refused (ENOSYS with the host tracer, SIGSYS under strace). */
export interface RefusedSyscall {
  /** The syscall's name (`syscall_<nr>` when this host's tables do not know it). */
  name: string;
  count: number;
}

export interface ObservedSideEffects {
  /** Host pid that executed bwrap (host side), null if the log has no such execve. */
  bwrapPid: number | null;
  /** Host pid of the program's first process (first successful execve by a bwrap child), null if it never started. */
  programPid: number | null;
  processesSpawned: ProcessesSpawned;
  signalsSent: SignalSent[];
  networkAttempts: NetworkAttempt[];
  privilegedSyscalls: PrivilegedSyscall[];
  deviceAccess: DeviceAccess[];
  /** Writes and secret-path reads as observed (the runner keeps those outside the sandbox's areas). */
  fileAccess: FileAccess[];
  /** Observed calls whose arguments could not be read (absent: an observer that predates them). */
  unreadableSyscalls?: UnreadableSyscall[];
  /** Calls off the seccomp allowlist, refused (absent: an observer that predates them). */
  refusedSyscalls?: RefusedSyscall[];
  /** Lines that did not match the strace format (counted, never trusted). */
  unparsedLines: number;
}

export type FsChangeKind = 'added' | 'modified' | 'deleted';
export type FsEntryType = 'file' | 'dir' | 'symlink' | 'hardlink' | 'fifo' | 'socket' | 'char-device' | 'block-device';

export interface FsChange {
  change: FsChangeKind;
  /** Absolute path as seen inside the sandbox: mountPoint + relative path. */
  path: string;
  /** Type after the change (before it, for a deletion). */
  type: FsEntryType;
  /** Permission bits and file type bits (st_mode), after the change (before it, for a deletion). */
  mode: number;
  size: number;
  sha256Before?: string;
  sha256After?: string;
  /** Symlink target, read with readlink and never followed. */
  linkTarget?: string;
  /** A regular file with nlink > 1: it may be a hard link to a file outside the tree. */
  nlink?: number;
  /** Other paths of the same inode inside the snapshot, when there are any. */
  hardlinkOf?: string[];
  /** What the change was before, when the type itself changed (e.g. a file replaced by a symlink). */
  typeBefore?: FsEntryType;
  /** Owner of the real entry before the change (scopes only): promotion acts only on the scope owner's. */
  uidBefore?: number;
  /** st_mode before the change (modified entries; a deletion's is `mode`): a rollback must be able to write it back. */
  modeBefore?: number;
}
