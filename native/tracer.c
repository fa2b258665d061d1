// airlock-tracer: the host-side launcher and syscall observer of the `ns` lane, one long-lived process
// for every run.
//
// Why not strace: strace costs ~6 ms to start (it probes the kernel by forking test children) and,
// following bwrap from its first instruction, stops on bwrap's own set-up; a run of /bin/true took
// 40+ ms under it. This tracer is started once, starts each run's bwrap itself (see "launches") and
// attaches to the sandbox's init process while bwrap holds it on --block-fd, so a run pays only for
// the stops of the program's own observed syscalls.
//
// Which syscalls stop: the ns lane's seccomp filter answers SECCOMP_RET_TRACE for the observed ones
// (exec, process creation, signals, sockets, opens, changes of a path or through a descriptor) and
// SECCOMP_RET_TRAP (SIGSYS) for the denied ones.
// Without a tracer attached, SECCOMP_RET_TRACE fails the call with ENOSYS: a lost tracer can hide
// nothing, the program just stops working. PTRACE_O_EXITKILL kills every tracee if this process dies.
//
// Protocol. stdin, one request per line:
//   `R <run> <hold> <cpuSoft> <cpuHard> <fsize|-1> <as|-1> <nproc|-1> <uid> <gid[:group]> <stdout fifo> <stderr fifo> <seccomp file>
//    <cgroup.procs files|-|h<slot>x<files>> <argv>...`: start bwrap for a run (details at parse_request
//    and "launches"); with `h<slot>`, from the launcher held in that slot, or, when it is gone, from one
//    forked into the files' cgroups.
//   `G <run>`: let a held run's init go on.
//   `H <slot> <cgroup.procs files>`: fork a launcher ahead of need that moves itself into those cgroups
//    and waits for an `R` naming it (details at "held launchers").
//   `C <slot>`: end a held launcher that no run will take.
// stdout, one line per event, `<run> <type> ...`; strings are hex so no byte can break the framing:
//   R ok <pid> [held] | R err <step> <errno>  bwrap started (its pid; `held`: from a held launcher) |
//                                        a step failed (busy, request, fifo, pipe, fork: nothing runs;
//                                        cgroup, rlimit, fds, ids, exec: in the child, whose exit W and
//                                        Z follow; a held launcher's fifo, request or params: it is
//                                        killed, W and Z follow). A held launcher's lines carry its
//                                        slot until an `R` takes it.
//   B <pid> | B err <step> <errno> <pid> bwrap's init is traced | could not be (step ptrace or rlimit;
//                                        the init is still blocked)
//   W <code|-> <signal|->                bwrap itself ended
//   P <pid>                              the program's first process (first successful exec of the run)
//   X <pid> <hexpath> <anon>             successful exec (path as the program passed it; anon: `-`, or
//                                        the hex of the kernel's name of a file that has no name in any
//                                        filesystem (nlink 0: memfd, O_TMPFILE, deleted), read at exec)
//   F <parent> <child> <t|p>             a sandboxed task created a thread (t) or a process (p)
//   S <pid> <name> <target|-> <sig> <res>         signal sent
//   K <pid> <domain> <type> <proto> <res>          socket created (res: the fd)
//   N <pid> <name> <fd> <hexsockaddr> <res>        address given to connect/bind/sendto/sendmsg/sendmmsg
//   D <pid> <name> <hexpath> <res>                 open/mknod of a path that contains "dev" (superset;
//                                                  the host decides what a device path is)
//   A <pid> <name> w <hexpath> <res>               a write: an open for writing or creating, or a
//                                                  call that creates, removes, renames, links a
//                                                  path or changes its mode, owner, times or
//                                                  xattrs (the path it creates or changes; a
//                                                  rename's or link's new name; for a call on a
//                                                  descriptor, the name of the file behind it)
//   A <pid> <name> r <hexpath> -                   an open for reading of a path under a host-secret
//                                                  prefix (superset; the host decides), sent at entry:
//                                                  no exit stop for reads, whose result the host infers
//   T <pid> <nr> <arch>                  SIGSYS from the seccomp filter: a denied syscall was attempted
//   L <pid> <nr> <arch>                  a syscall off the filter's allowlist: refused here (ENOSYS)
//   U <pid> <name> <res>                 an observed call whose argument (path, sockaddr, msghdr,
//                                        open_how) could not be read: the attempt, without its argument
//   Y <pid> <name> e11                   a fork or clone the kernel refused with EAGAIN, in a run whose
//                                        processes RLIMIT_NPROC counts (no pids cgroup: its limit)
//   M err <errno>                        the host's device nodes in /dev could not be made read-only
//                                        (seal_device_nodes): the program is killed before it runs
//   E <pid> <code|-> <signal|->          the program's first process ended
//   Q <pid>                              a sandboxed task ended (after E for the program's own)
//   Z                                    bwrap and every traced task of the run are gone (last line)
// <res> is `ok`, a number for socket's fd, or `e<errno>`.
// Events before a task's first exec are bwrap's own set-up and are not reported.
// What cannot be read is never dropped: memory no other process can read (memfd_secret, refused by the
// filter anyway) or a pointer into nothing gives a `U` line, which the host judges as a failure.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <grp.h>
#include <sys/ptrace.h>
#include <linux/nsfs.h>
#include <sys/ioctl.h>
#include <sys/mount.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/user.h>
#include <stddef.h>
#include <elf.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef PTRACE_GET_SYSCALL_INFO
#define PTRACE_GET_SYSCALL_INFO 0x420e
#endif
#ifndef NT_ARM_SYSTEM_CALL
#define NT_ARM_SYSTEM_CALL 0x404
#endif
#ifndef SYS_fchmodat2
#define SYS_fchmodat2 452 // Linux 6.6; the same number on x86_64 and aarch64
#endif
#ifndef SYS_setxattrat
#define SYS_setxattrat 463 // Linux 6.13; the same numbers on x86_64 and aarch64
#define SYS_removexattrat 466
#endif
#define SC_OP_EXIT 2
#define SC_OP_SECCOMP 3
#define SYS_SECCOMP_CODE 1
#define REFUSE_DATA 1 // SECCOMP_RET_DATA of the filter's TRACE for a syscall off its allowlist (seccomp.ts)

// struct ptrace_syscall_info (include/uapi/linux/ptrace.h), spelled out: glibc versions disagree.
struct sc_info {
  uint8_t op;
  uint8_t pad[3];
  uint32_t arch;
  uint64_t ip, sp;
  union {
    struct { uint64_t nr, args[6]; } entry;
    struct { int64_t rval; uint8_t is_error; } exit;
    struct { uint64_t nr, args[6]; uint32_t ret_data; } seccomp;
  };
};

// ---- output ------------------------------------------------------------------------------------

#define PATH_CAP 4096
#define IBUF_CAP (1 << 20) // the longest request line
#define MAX_ARGS 8192
// A pending event holds up to three lines (D as written, D and A where links led) of a path made of
// a cwd and a relative path (each up to PATH_CAP), each line with at most two such paths,
// hex-encoded: 3 lines x 2 paths x 2 x (2 x PATH_CAP + 2) + framing.
#define PEND_CAP (24 * PATH_CAP + 512)

static char obuf[1 << 17];
static size_t olen;

static void flush_out(void) {
  size_t off = 0;
  while (off < olen) {
    ssize_t n = write(1, obuf + off, olen - off);
    if (n < 0) {
      if (errno == EINTR) continue;
      _exit(2); // node is gone: EXITKILL ends every tracee with us
    }
    off += (size_t)n;
  }
  olen = 0;
}

static void out(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void out(const char *fmt, ...) {
  // Room for the longest line (a pending event, or a secret read's hex path) before writing it.
  if (olen > sizeof obuf - (PEND_CAP + 256)) flush_out();
  va_list ap;
  va_start(ap, fmt);
  int n = vsnprintf(obuf + olen, sizeof obuf - olen, fmt, ap);
  va_end(ap);
  if (n > 0) olen += (size_t)n < sizeof obuf - olen ? (size_t)n : sizeof obuf - olen - 1;
}

static void hex(char *dst, const unsigned char *src, size_t n) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) {
    dst[2 * i] = d[src[i] >> 4];
    dst[2 * i + 1] = d[src[i] & 15];
  }
  dst[2 * n] = 0;
}

// ---- tasks and runs ----------------------------------------------------------------------------


struct task {
  pid_t pid;
  int run;
  int sandboxed;    // has exec'd (or descends from a task that had) in this run
  int awaiting_exit; // resumed with PTRACE_SYSCALL for a pending event
  int initial_stop;  // auto-attached child whose first stop is still to come
  int held;          // has a resume waiting in deferred[] (see resume)
  uint64_t clone_flags;
  char *exec_path;  // hex of the path of the last execve entry
  char pend[PEND_CAP]; // event line without its result
  struct task *next;
};

#define BUCKETS 4096
static struct task *table[BUCKETS];

static struct task *find(pid_t pid) {
  for (struct task *t = table[pid % BUCKETS]; t; t = t->next)
    if (t->pid == pid) return t;
  return NULL;
}

static struct task *add(pid_t pid, int run) {
  struct task *t = calloc(1, sizeof *t);
  if (!t) _exit(3);
  t->pid = pid;
  t->run = run;
  t->next = table[pid % BUCKETS];
  table[pid % BUCKETS] = t;
  return t;
}

static void drop(pid_t pid) {
  for (struct task **p = &table[pid % BUCKETS]; *p; p = &(*p)->next)
    if ((*p)->pid == pid) {
      struct task *t = *p;
      *p = t->next;
      free(t->exec_path);
      free(t);
      return;
    }
}

struct run {
  int id, live, program, in_use;
  int nproc_backstop; // RLIMIT_NPROC counts its processes (no cgroup does): a refused fork is reported
  int root1; // 1 + a descriptor of the sandbox's root (/proc/<pid>/root), opened at its first path; 0: none
};
#define MAX_RUNS 256
static struct run runs[MAX_RUNS];
static void maybe_finish(struct run *r);
static int on_launch_gone(pid_t pid, int status);

static struct run *run_of(int id) {
  for (int i = 0; i < MAX_RUNS; i++)
    if (runs[i].in_use && runs[i].id == id) return &runs[i];
  return NULL;
}

// Auto-attached children whose first stop arrived before their parent's fork event.
#define MAX_EARLY 1024
static pid_t early[MAX_EARLY];
static int nearly;

static int take_early(pid_t pid) {
  for (int i = 0; i < nearly; i++)
    if (early[i] == pid) {
      early[i] = early[--nearly];
      return 1;
    }
  return 0;
}

// ---- tracee memory -----------------------------------------------------------------------------

// Word by word with PTRACE_PEEKDATA (the task is in a ptrace stop): what the program's memory holds
// from `addr`, as far as it can be read.
static size_t peek_words(pid_t pid, uint64_t addr, unsigned char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    uint64_t at = addr + got, word_at = at & ~(uint64_t)(sizeof(long) - 1);
    errno = 0;
    long w = ptrace(PTRACE_PEEKDATA, pid, (void *)(uintptr_t)word_at, NULL);
    if (w == -1 && errno) break;
    size_t off = (size_t)(at - word_at), k = sizeof(long) - off < n - got ? sizeof(long) - off : n - got;
    memcpy(buf + got, (unsigned char *)&w + off, k);
    got += k;
  }
  return got;
}

// process_vm_readv first (one call); it refuses pages the program mapped without PROT_READ (which the
// kernel itself still reads on x86: a write-only page would hide a path from us), so a failure is
// retried through /proc/<pid>/mem, which reads them as ptrace does. A non-dumpable program's
// /proc/<pid>/mem is root's (0600): an ordinary user's tracer reads the rest with PTRACE_PEEKDATA.
// Still unreadable: memory no other process can read (memfd_secret) and addresses with nothing mapped.
static ssize_t peek(pid_t pid, uint64_t addr, void *buf, size_t n) {
  struct iovec local = {buf, n}, remote = {(void *)(uintptr_t)addr, n};
  ssize_t got = process_vm_readv(pid, &local, 1, &remote, 1, 0);
  if (got == (ssize_t)n || addr > (uint64_t)INT64_MAX) return got;
  char mem[64];
  snprintf(mem, sizeof mem, "/proc/%d/mem", pid);
  int fd = open(mem, O_RDONLY | O_CLOEXEC);
  if (fd >= 0) {
    ssize_t r = pread(fd, buf, n, (off_t)addr);
    close(fd);
    return r > got ? r : got;
  }
  size_t from = got > 0 ? (size_t)got : 0, more = peek_words(pid, addr + from, (unsigned char *)buf + from, n - from);
  return more > 0 ? (ssize_t)(from + more) : got;
}

// A NUL-terminated string from the tracee, read page by page (a string may end before an unmapped
// page). -1: NULL (the kernel refuses it); -2: unreadable, or it goes on into unreadable memory.
static ssize_t peek_str(pid_t pid, uint64_t addr, char *buf, size_t cap) {
  size_t got = 0;
  if (addr == 0) return -1;
  while (got < cap - 1) {
    size_t page_left = 4096 - ((addr + got) & 4095);
    size_t want = page_left < cap - 1 - got ? page_left : cap - 1 - got;
    ssize_t n = peek(pid, addr + got, buf + got, want);
    if (n <= 0) return -2;
    char *nul = memchr(buf + got, 0, (size_t)n);
    if (nul) return nul - buf;
    got += (size_t)n;
  }
  buf[got] = 0;
  return (ssize_t)got;
}

#include "sandbox-path.h"

// ---- syscall classes ---------------------------------------------------------------------------

enum cls { C_NONE, C_EXEC, C_EXECAT, C_CLONE, C_FORK, C_SIG, C_SOCKET, C_ADDR, C_SENDTO, C_SENDMSG, C_SENDMMSG, C_OPEN, C_OPENAT, C_OPENAT2, C_PATHW, C_FDW };

static enum cls classify(long nr, const char **name) {
  switch (nr) {
#define K(sys, c) case sys: *name = #sys + 4; return c;
    K(SYS_execve, C_EXEC)
    K(SYS_execveat, C_EXECAT)
    K(SYS_clone, C_CLONE)
#ifdef SYS_fork
    K(SYS_fork, C_FORK)
    K(SYS_vfork, C_FORK)
#endif
    K(SYS_kill, C_SIG)
    K(SYS_tkill, C_SIG)
    K(SYS_tgkill, C_SIG)
    K(SYS_rt_sigqueueinfo, C_SIG)
    K(SYS_rt_tgsigqueueinfo, C_SIG)
    K(SYS_pidfd_send_signal, C_SIG)
    K(SYS_socket, C_SOCKET)
    K(SYS_connect, C_ADDR)
    K(SYS_bind, C_ADDR)
    K(SYS_sendto, C_SENDTO)
    K(SYS_sendmsg, C_SENDMSG)
    K(SYS_sendmmsg, C_SENDMMSG)
#ifdef SYS_open
    K(SYS_open, C_OPEN)
    K(SYS_creat, C_OPEN)
    K(SYS_mknod, C_OPEN)
#endif
    K(SYS_openat, C_OPENAT)
    K(SYS_openat2, C_OPENAT2)
    K(SYS_mknodat, C_OPENAT)
#ifdef SYS_mkdir
    K(SYS_mkdir, C_PATHW)
    K(SYS_rmdir, C_PATHW)
    K(SYS_unlink, C_PATHW)
    K(SYS_link, C_PATHW)
    K(SYS_symlink, C_PATHW)
    K(SYS_rename, C_PATHW)
    K(SYS_chmod, C_PATHW)
    K(SYS_chown, C_PATHW)
    K(SYS_lchown, C_PATHW)
    K(SYS_utime, C_PATHW)
    K(SYS_utimes, C_PATHW)
    K(SYS_futimesat, C_PATHW)
#endif
    K(SYS_truncate, C_PATHW)
    K(SYS_mkdirat, C_PATHW)
    K(SYS_unlinkat, C_PATHW)
    K(SYS_linkat, C_PATHW)
    K(SYS_symlinkat, C_PATHW)
    K(SYS_renameat, C_PATHW)
    K(SYS_renameat2, C_PATHW)
    K(SYS_fchmodat, C_PATHW)
    K(SYS_fchmodat2, C_PATHW)
    K(SYS_fchownat, C_PATHW)
    K(SYS_utimensat, C_PATHW)
    K(SYS_setxattr, C_PATHW)
    K(SYS_lsetxattr, C_PATHW)
    K(SYS_removexattr, C_PATHW)
    K(SYS_lremovexattr, C_PATHW)
    K(SYS_setxattrat, C_PATHW)
    K(SYS_removexattrat, C_PATHW)
    K(SYS_fchmod, C_FDW)
    K(SYS_fchown, C_FDW)
    K(SYS_fsetxattr, C_FDW)
    K(SYS_fremovexattr, C_FDW)
    K(SYS_ioctl, C_FDW) // only the commands that change a file's inode flags stop (seccomp.ts, INODE_IOCTLS)
#undef K
  }
  return C_NONE;
}

// How pend_path_call takes a path argument (bits).
enum {
  P_PATHW = 1,       // the call changes the path (its A line has no open flags to look at)
  P_FOLLOW = 2,      // it follows a link at the path's last component
  P_IN_ROOT = 4,     // openat2's RESOLVE_IN_ROOT or RESOLVE_BENEATH: the dirfd is the top
  P_CREATES = 8,     // creat, mknod
  P_UNREADABLE = 16, // another argument of the call (openat2's open_how) could not be read
  P_EMPTY_FD = 32,   // "" names the dirfd itself (AT_EMPTY_PATH)
  P_NULL_FD = 64,    // so does NULL
};

// P_FOLLOW and AT_EMPTY_PATH's bits from an *at call's flags. With AT_EMPTY_PATH, a NULL path is ""
// for the calls that take it (Linux 6.18's setxattrat acts on the cwd for (AT_FDCWD, NULL); the
// others fail, and may not later).
static unsigned at_flags(uint64_t f) {
  return (f & AT_SYMLINK_NOFOLLOW ? 0 : P_FOLLOW) | (f & AT_EMPTY_PATH ? P_EMPTY_FD | P_NULL_FD : 0);
}

// Which arguments of a C_PATHW call hold the changed path: (dirfd index or -1 for the cwd, path
// index), and how the path is taken (`a`: the call's arguments).
static unsigned pathw_args(long nr, const uint64_t *a, int *dfd, int *path) {
  *dfd = -1;
  *path = 0;
  switch (nr) {
#ifdef SYS_mkdir
  case SYS_link: case SYS_symlink: case SYS_rename: *path = 1; return P_PATHW;
  case SYS_chmod: case SYS_chown: case SYS_utime: case SYS_utimes: return P_PATHW | P_FOLLOW;
  // A NULL path (futimesat's, utimensat's: futimens) acts on the dirfd, a descriptor.
  case SYS_futimesat: *dfd = 0; *path = 1; return P_PATHW | P_FOLLOW | P_NULL_FD;
#endif
  case SYS_truncate: case SYS_setxattr: case SYS_removexattr: return P_PATHW | P_FOLLOW;
  case SYS_utimensat: *dfd = 0; *path = 1; return P_PATHW | P_NULL_FD | at_flags(a[3]);
  case SYS_setxattrat: case SYS_removexattrat: *dfd = 0; *path = 1; return P_PATHW | at_flags(a[2]);
  case SYS_mkdirat: case SYS_unlinkat: *dfd = 0; *path = 1; return P_PATHW;
  case SYS_fchmodat: *dfd = 0; *path = 1; return P_PATHW | P_FOLLOW;
  case SYS_fchmodat2: *dfd = 0; *path = 1; return P_PATHW | at_flags(a[3]);
  case SYS_fchownat: *dfd = 0; *path = 1; return P_PATHW | at_flags(a[4]);
  case SYS_renameat: case SYS_renameat2: case SYS_linkat: *dfd = 2; *path = 3; return P_PATHW;
  case SYS_symlinkat: *dfd = 1; *path = 2; return P_PATHW;
  }
  return P_PATHW; // mkdir, rmdir, unlink, lchown, lsetxattr, lremovexattr
}

// Lexical normalisation in place: `//` and `/./` collapse, `..` removes a segment (as node's
// path.posix.normalize does), so `/tmp/../root/x` and `//root` match their prefix below.
static void normalize_path(char *p) {
  char *w = p;
  for (char *r = p; *r;) {
    while (*r == '/') r++;
    if (!*r) break;
    char *seg = r;
    while (*r && *r != '/') r++;
    size_t n = (size_t)(r - seg);
    if (n == 1 && seg[0] == '.') continue;
    if (n == 2 && seg[0] == '.' && seg[1] == '.') {
      while (w > p && *--w != '/') {}
      continue;
    }
    *w++ = '/';
    memmove(w, seg, n);
    w += n;
  }
  if (w == p) *w++ = '/';
  *w = 0;
}

// Host-secret prefixes whose reads are reported (a superset: the host drops the ones it exposed on
// purpose, such as an interpreter's prefix, and the declared scopes). `p` is normalized.
static int secret_path(const char *p) {
  static const char *const prefixes[] = {"/root", "/home", "/etc/shadow", "/etc/gshadow", "/etc/sudoers", "/etc/ssh", "/etc/ssl/private", "/run", "/var", "/boot", "/mnt", "/media", "/srv", "/opt"};
  for (size_t i = 0; i < sizeof prefixes / sizeof *prefixes; i++) {
    size_t n = strlen(prefixes[i]);
    if (strncmp(p, prefixes[i], n) == 0 && (p[n] == 0 || p[n] == '/' || p[n] == '-')) return 1;
  }
  return 0;
}

// Appends `<sep>X <pid> <name> [<extra> ]<hexpath>[:<hexwritten>]` to the pending line (`written`:
// the path as the program wrote it, when links made it lead elsewhere); 0 when it does not fit.
static int pend_path(struct task *t, char kind, const char *name, const char *extra, const char *path, const char *written) {
  size_t l = strlen(t->pend), pl = strlen(path), wl = written ? strlen(written) : 0;
  int n = snprintf(t->pend + l, PEND_CAP - l, "%s%c %d %s %s%s", l ? "\x1f" : "", kind, t->pid, name, extra, *extra ? " " : "");
  if (n < 0 || l + (size_t)n + 2 * (pl + wl) + 2 >= PEND_CAP) {
    t->pend[l] = 0;
    return 0;
  }
  char *at = t->pend + l + (size_t)n;
  hex(at, (const unsigned char *)path, pl);
  if (written) {
    at[2 * pl] = ':';
    hex(at + 2 * pl + 1, (const unsigned char *)written, wl);
  }
  return 1;
}

// Appends `<sep><kind> <pid> <name>` to the pending line. `U`: the attempt, whose argument could not be
// read; `u`: the same unless the kernel fails the call with EBADF; `y`: a fork, sent as `Y` only if
// the kernel refuses it with EAGAIN (on_syscall_exit).
static void pend_mark(struct task *t, char kind, const char *name) {
  size_t l = strlen(t->pend);
  snprintf(t->pend + l, PEND_CAP - l, "%s%c %d %s", l ? "\x1f" : "", kind, t->pid, name);
  t->awaiting_exit = 1;
}
static void pend_unreadable(struct task *t, const char *name) { pend_mark(t, 'U', name); }

// Appends `<sep>N <pid> <name> <fd> <hex sockaddr>` for the len bytes at addr. 0: nothing to report
// (no address: NULL or length 0); -1: the address could not be read.
static int pend_sockaddr(struct task *t, const char *name, long fd, uint64_t addr, uint64_t len) {
  unsigned char sa[128];
  if (addr == 0 || len == 0) return 0;
  if (len > sizeof sa) len = sizeof sa; // the kernel refuses longer ones (EINVAL)
  if (peek(t->pid, addr, sa, (size_t)len) != (ssize_t)len) return -1;
  size_t l = strlen(t->pend);
  int n = snprintf(t->pend + l, PEND_CAP - l, "%sN %d %s %d ", l ? "\x1f" : "", t->pid, name, (int)fd);
  if (n < 0 || l + (size_t)n + 2 * len + 1 >= PEND_CAP) {
    t->pend[l] = 0;
    return -1; // more addresses than a line holds (sendmmsg): the rest is reported as unreadable
  }
  hex(t->pend + l + (size_t)n, sa, (size_t)len);
  t->awaiting_exit = 1;
  return 1;
}

// The main loop serves tracees in rounds: every task stopped now is handled once, and only then
// are they resumed, together. waitpid(-1) hands out stopped tasks in the kernel's list order, newest
// tracee first, and a task resumed at once stops again within microseconds: without rounds, one run's
// threads looping on traced calls were always first, so another run's stops waited seconds (a run
// that had finished was reported as a TIMEOUT), and lines and requests waited for the loop to end.
// A round lets at most this many of one run's tasks go on; the rest wait for the next round, so a run
// with many threads gets no more turns than a run with one (each run's oldest stops go first).
#define RUN_SHARE 8
// One entry per stopped task at most (a held task makes no other stop), grown as needed: a fixed size
// had the loop stop collecting stops once full, and then no run's stops or exits were seen.
static struct deferred_resume {
  pid_t pid;
  int req, sig, slot;
} *deferred;
static int ndeferred, deferred_cap, in_round;

// A pid's deferred resume, or -1. A pid has one at most: its latest stop's. It can stop twice while it
// has one only when another thread's exec gives it the leader's pid (the leader, stopped and handled
// before, is gone); resuming both would let the new program's next stop, a traced call, through
// unjudged.
static int deferred_of(pid_t pid) {
  for (int i = 0; i < ndeferred; i++)
    if (deferred[i].pid == pid) return i;
  return -1;
}

static void resume(struct task *t, int sig) {
  int req = t->awaiting_exit ? PTRACE_SYSCALL : PTRACE_CONT;
  if (!in_round) {
    ptrace(req, t->pid, 0, (void *)(uintptr_t)sig);
    return;
  }
  int i = t->held ? deferred_of(t->pid) : -1;
  if (i < 0) {
    if (ndeferred == deferred_cap) {
      deferred_cap = deferred_cap ? 2 * deferred_cap : 1024;
      deferred = realloc(deferred, (size_t)deferred_cap * sizeof *deferred);
      if (!deferred) _exit(3);
    }
    i = ndeferred++;
    t->held = 1;
  }
  struct run *r = run_of(t->run);
  deferred[i] = (struct deferred_resume){t->pid, req, sig, r ? (int)(r - runs) : -1};
}

// A task gone is never resumed by pid afterwards (the pid may be another's by then).
static void drop_deferred(pid_t pid) {
  struct task *t = find(pid);
  int i = t && t->held ? deferred_of(pid) : -1;
  if (i < 0) return;
  memmove(&deferred[i], &deferred[i + 1], (size_t)(ndeferred - i - 1) * sizeof deferred[0]);
  ndeferred--;
}

// Skips the syscall the task is stopped at (seccomp stop) so that it returns -ENOSYS: the kernel
// does not run a call whose number the tracer set to -1, and returns what the return register holds.
static int refuse_syscall(pid_t pid) {
#if defined(__x86_64__)
  return ptrace(PTRACE_POKEUSER, pid, offsetof(struct user_regs_struct, orig_rax), (void *)-1L) == 0 &&
         ptrace(PTRACE_POKEUSER, pid, offsetof(struct user_regs_struct, rax), (void *)(long)-ENOSYS) == 0;
#elif defined(__aarch64__)
  int nr = -1;
  struct user_pt_regs regs;
  struct iovec sc = {&nr, sizeof nr}, rg = {&regs, sizeof regs};
  if (ptrace(PTRACE_SETREGSET, pid, NT_ARM_SYSTEM_CALL, &sc) != 0 || ptrace(PTRACE_GETREGSET, pid, NT_PRSTATUS, &rg) != 0) return 0;
  regs.regs[0] = (uint64_t)-ENOSYS;
  return ptrace(PTRACE_SETREGSET, pid, NT_PRSTATUS, &rg) == 0;
#else
  (void)pid;
  return 0;
#endif
}

// The sandbox's root, as its tasks see it (-1: unreadable). One per run: a program can neither
// chroot nor change its mount namespace (the seccomp filter refuses both), so every task shares it.
static int run_root(struct task *t) {
  struct run *r = run_of(t->run);
  if (!r) return -1;
  if (r->root1 > 0) return r->root1 - 1;
  char at[64];
  snprintf(at, sizeof at, "/proc/%d/root", t->pid);
  int fd = open(at, O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (fd >= 0) r->root1 = fd + 1;
  return fd;
}

// Where a relative path starts: the program's cwd or dirfd, as a descriptor (the kernel's own jump
// through /proc/<pid>/cwd or fd/N) and as a name (its text there; empty when it has none a path can
// hold). OWN_FD_NONE: the task has no such descriptor; OWN_FD_UNKNOWN: it could not be had.
static int start_of(pid_t pid, long dirfd, char *name, size_t cap) {
  int f = task_fd(pid, dirfd); // a non-dumpable program's descriptors too (see own_fd)
  ssize_t n = f >= 0 ? fd_name(f, name, cap) : -1;
  name[n > 0 ? n : 0] = 0;
  return f;
}

// The writable areas of every run, where a change is never a finding (the host drops it: runner.ts).
static int always_writable(const char *p) {
  static const char *const areas[] = {"/tmp", "/out", "/dev/shm"};
  for (size_t i = 0; i < sizeof areas / sizeof *areas; i++) {
    size_t n = strlen(areas[i]);
    if (strncmp(p, areas[i], n) == 0 && (p[n] == 0 || p[n] == '/')) return 1;
  }
  return 0;
}

// The kernel's name of the program's descriptor `fd` (AT_FDCWD: its cwd), as its /proc link reads;
// -1 when it cannot be read, or is too long for `cap`.
static ssize_t fd_link_name(pid_t tid, long fd, char *dst, size_t cap) {
  char link[64];
  fd_link(tid, fd, link);
  ssize_t n = readlink(link, dst, cap);
  if (n < 0 || (size_t)n >= cap) return -1;
  dst[n] = 0;
  return n;
}

// A call on a descriptor (fchmod, fsetxattr, futimens, "" with AT_EMPTY_PATH) changes what it refers
// to: an A line with the name the file system still gives that (a file, a folder, a link, a device: a
// path reaches it too). A pipe, a socket, a FIFO (stdout's is the host's), a memfd, a deleted or an
// O_TMPFILE file, or what has no name in a file system ("anon_inode:[eventfd]") no path of the
// sandbox reaches: nothing to judge. A descriptor the tracer cannot see, or whose name it cannot read,
// is `U`; one the task lacks too, unless the kernel fails the call (EBADF): another thread may open
// one under that number before the kernel looks.
static void pend_fd_call(struct task *t, const char *name, long fd) {
  char at[PATH_CAP];
  // Most such calls are on the program's own files (tar, cp -p, touch): the kernel's name of the file
  // is enough to tell, and no exit stop follows.
  if (fd_link_name(t->pid, fd, at, sizeof at) > 0 && always_writable(at)) return;
  int f = task_fd(t->pid, fd);
  if (f < 0) return pend_mark(t, f == OWN_FD_NONE ? 'u' : 'U', name);
  int named = named_file(f, 0, at, sizeof at);
  close(f);
  if (named < 0) return pend_unreadable(t, name);
  if (named && pend_path(t, 'A', name, "w", at, NULL)) t->awaiting_exit = 1;
}

// The D and A lines of a call's path argument, judged by where it leads in the sandbox (links
// resolved: sandbox-path.h), or `U` when it (or, for openat2, its open_how) cannot be read or the
// host cannot tell where it leads. `how`: P_* bits; `flags`: an open's flags.
static void pend_path_call(struct task *t, const char *name, long dirfd, uint64_t addr, uint64_t flags, unsigned how) {
  // as written, made absolute (a cwd and a relative path, each up to PATH_MAX), normalized, and where it leads
  char rel[PATH_CAP], base[PATH_CAP], raw[2 * PATH_CAP + 2], path[2 * PATH_CAP + 2], real[2 * PATH_CAP + 2];
  ssize_t got = peek_str(t->pid, addr, rel, sizeof rel);
  if (got == -1 && (how & P_NULL_FD)) got = (ssize_t)(rel[0] = 0), how |= P_EMPTY_FD;
  if (got == -1) return; // NULL: the kernel fails the call
  if (got < 0 || (how & P_UNREADABLE)) return pend_unreadable(t, name);
  // "": the call acts on the dirfd itself (AT_EMPTY_PATH), or fails (ENOENT).
  if (got == 0) {
    if (how & P_EMPTY_FD) pend_fd_call(t, name, dirfd);
    return;
  }
  int in_root = (how & P_IN_ROOT) != 0, top = run_root(t), start = top;
  base[0] = 0;
  if (rel[0] != '/' || in_root) {
    start = start_of(t->pid, dirfd, base, sizeof base);
    if (start == OWN_FD_NONE) return pend_mark(t, 'u', name); // unless the kernel fails it (EBADF)
    // A dirfd that is no folder: the kernel fails the call (ENOTDIR).
    struct stat st;
    if (start >= 0 && fstat(start, &st) == 0 && !S_ISDIR(st.st_mode)) {
      close(start);
      return;
    }
  }
  enum walk w = sandbox_path(t->pid, in_root ? start : top, start, in_root, rel, (how & P_FOLLOW) != 0, (how & P_PATHW) != 0, real, sizeof real);
  if (start != top && start >= 0) close(start);
  // The path as written, made absolute against its folder's name (`/` after it for RESOLVE_IN_ROOT).
  int named = rel[0] == '/' && !in_root ? snprintf(raw, sizeof raw, "%s", rel) : base[0] == '/' ? snprintf(raw, sizeof raw, "%s/%s", base, rel) : -1;
  // Where it leads must be known: from the walk, or from a folder's name when it meets no link.
  if (w == WALK_FAILED || (w == WALK_SAME && named < 0)) return pend_unreadable(t, name);
  if (named < 0) snprintf(raw, sizeof raw, "%s", rel); // relative, and where it leads is known
  memcpy(path, raw, strlen(raw) + 1);
  if (named >= 0) normalize_path(path);
  // Judged by where it leads; the path as written goes along when it differs.
  const char *judged = w == WALK_RESOLVED ? real : path, *written = judged == real && strcmp(real, path) != 0 ? raw : NULL;
  if (how & P_PATHW) {
    if (pend_path(t, 'A', name, "w", judged, written)) t->awaiting_exit = 1;
    return;
  }
  // Write intent from the flags; creat and mknod create.
  int writes = (how & P_CREATES) || (flags & (O_WRONLY | O_RDWR | O_CREAT | O_TRUNC | O_APPEND)) != 0;
  if (strstr(path, "dev") && pend_path(t, 'D', name, "", path, NULL)) t->awaiting_exit = 1;
  if (written && strstr(judged, "dev") && pend_path(t, 'D', name, "", judged, written)) t->awaiting_exit = 1;
  if (writes && pend_path(t, 'A', name, "w", judged, written)) t->awaiting_exit = 1;
  else if (!writes && secret_path(judged)) {
    char h[4 * sizeof path + 2];
    hex(h, (const unsigned char *)judged, strlen(judged));
    if (written) {
      size_t hl = strlen(h);
      h[hl] = ':';
      hex(h + hl + 1, (const unsigned char *)written, strlen(written));
    }
    out("%d A %d %s r %s -\n", t->run, t->pid, name, h);
  }
}

static void on_seccomp(struct task *t) {
  struct sc_info si;
  const char *name = "";
  memset(&si, 0, sizeof si);
  t->awaiting_exit = 0;
  t->pend[0] = 0;
  if (ptrace(PTRACE_GET_SYSCALL_INFO, t->pid, sizeof si, &si) <= 0 || si.op != SC_OP_SECCOMP) return resume(t, 0);
  if (si.seccomp.ret_data == REFUSE_DATA) {
    // Off the allowlist: reported and refused. A call we cannot refuse must not run: end the task.
    out("%d L %d %llu %u\n", t->run, t->pid, (unsigned long long)si.seccomp.nr, si.arch);
    if (!refuse_syscall(t->pid)) kill(t->pid, SIGKILL);
    return resume(t, 0);
  }
  const uint64_t *a = si.seccomp.args;
  enum cls c = classify((long)si.seccomp.nr, &name);
  char path[2 * PATH_CAP + 2];
  switch (c) {
  case C_EXEC:
  case C_EXECAT: {
    ssize_t n = peek_str(t->pid, c == C_EXEC ? a[0] : a[1], path, sizeof path);
    free(t->exec_path);
    t->exec_path = malloc(n > 0 ? 2 * (size_t)n + 1 : 1);
    if (t->exec_path) hex(t->exec_path, (unsigned char *)path, n > 0 ? (size_t)n : 0);
    if (n == -2 && t->sandboxed) pend_unreadable(t, name);
    break;
  }
  case C_CLONE:
  case C_FORK: {
    t->clone_flags = c == C_CLONE ? a[0] : SIGCHLD;
    // Where RLIMIT_NPROC is the processes limit, nothing else tells the host it was reached.
    struct run *r = run_of(t->run);
    if (t->sandboxed && r && r->nproc_backstop) pend_mark(t, 'y', name);
    break;
  }
  case C_SIG:
    if (!t->sandboxed) break;
    if (strcmp(name, "pidfd_send_signal") == 0) snprintf(t->pend, PEND_CAP, "S %d %s - %d", t->pid, name, (int)a[1]);
    else if (strcmp(name, "tgkill") == 0 || strcmp(name, "rt_tgsigqueueinfo") == 0) snprintf(t->pend, PEND_CAP, "S %d %s %d %d", t->pid, name, (int)a[1], (int)a[2]);
    else snprintf(t->pend, PEND_CAP, "S %d %s %d %d", t->pid, name, (int)a[0], (int)a[1]);
    t->awaiting_exit = 1;
    break;
  case C_SOCKET:
    if (!t->sandboxed) break;
    snprintf(t->pend, PEND_CAP, "K %d %d %d %d", t->pid, (int)a[0], (int)a[1], (int)a[2]);
    t->awaiting_exit = 1;
    break;
  case C_ADDR:
  case C_SENDTO:
    if (!t->sandboxed) break;
    if ((c == C_ADDR ? pend_sockaddr(t, name, (long)a[0], a[1], a[2]) : pend_sockaddr(t, name, (long)a[0], a[4], a[5])) < 0) pend_unreadable(t, name);
    break;
  case C_SENDMSG:
  case C_SENDMMSG: {
    // struct msghdr starts with msg_name, msg_namelen; struct mmsghdr is a msghdr (56 bytes) + msg_len.
    // Every message is looked at (the kernel takes at most UIO_MAXIOV = 1024): one line per address.
    if (!t->sandboxed) break;
    unsigned n = c == C_SENDMSG ? 1 : (unsigned)a[2] > 1024 ? 1024 : (unsigned)a[2];
    for (unsigned i = 0; i < n; i++) {
      struct { uint64_t name; uint32_t namelen; } h;
      if (peek(t->pid, a[1] + (uint64_t)i * 64, &h, sizeof h) != (ssize_t)sizeof h || pend_sockaddr(t, name, (long)a[0], h.name, h.namelen) < 0) {
        pend_unreadable(t, name);
        break;
      }
    }
    break;
  }
  case C_OPEN:
  case C_OPENAT:
  case C_OPENAT2: {
    if (!t->sandboxed) break;
    // openat2's flags and resolve are fields of struct open_how (flags, mode, resolve), in the program's memory.
    int creates = strcmp(name, "creat") == 0 || strcmp(name, "mknod") == 0 || strcmp(name, "mknodat") == 0;
    uint64_t flags = creates ? 0 : c == C_OPEN ? a[1] : c == C_OPENAT ? a[2] : 0, how[3] = {0, 0, 0};
    int unreadable = c == C_OPENAT2 && peek(t->pid, a[2], how, sizeof how) != (ssize_t)sizeof how;
    if (c == C_OPENAT2) flags = how[0];
    // A last link is followed unless O_NOFOLLOW, O_CREAT | O_EXCL, or mknod says otherwise.
    int follow = strcmp(name, "creat") == 0 || (!creates && !(flags & O_NOFOLLOW) && (flags & (O_CREAT | O_EXCL)) != (O_CREAT | O_EXCL));
    unsigned in_root = (how[2] & (RESOLVE_IN_ROOT | RESOLVE_BENEATH)) != 0 ? P_IN_ROOT : 0;
    pend_path_call(t, name, c == C_OPEN ? AT_FDCWD : (long)a[0], c == C_OPEN ? a[0] : a[1], flags, (creates ? P_CREATES : 0) | (unreadable ? P_UNREADABLE : 0) | (follow ? P_FOLLOW : 0) | in_root);
    break;
  }
  case C_PATHW: {
    if (!t->sandboxed) break;
    int dfd, pi;
    unsigned how = pathw_args((long)si.seccomp.nr, a, &dfd, &pi);
    pend_path_call(t, name, dfd < 0 ? AT_FDCWD : (long)a[dfd], a[pi], 0, how);
    break;
  }
  case C_FDW:
    if (t->sandboxed) pend_fd_call(t, name, (long)a[0]);
    break;
  case C_NONE: break;
  }
  if (!t->awaiting_exit) t->pend[0] = 0;
  resume(t, 0);
}

static void on_syscall_exit(struct task *t) {
  struct sc_info si;
  memset(&si, 0, sizeof si);
  t->awaiting_exit = 0;
  if (t->pend[0] && ptrace(PTRACE_GET_SYSCALL_INFO, t->pid, sizeof si, &si) > 0 && si.op == SC_OP_EXIT) {
    char res[32];
    if (si.exit.is_error) snprintf(res, sizeof res, "e%lld", (long long)-si.exit.rval);
    else if (t->pend[0] == 'K') snprintf(res, sizeof res, "%lld", (long long)si.exit.rval);
    else snprintf(res, sizeof res, "ok");
    // sendmmsg may have queued several lines, separated by \x1f.
    for (char *line = t->pend, *sep; line; line = sep) {
      sep = strchr(line, '\x1f');
      if (sep) *sep++ = 0;
      if (line[0] == 'u' && si.exit.is_error && -si.exit.rval == EBADF) continue; // it reached nothing
      if (line[0] == 'y' && !(si.exit.is_error && -si.exit.rval == EAGAIN)) continue;
      if (line[0] == 'u' || line[0] == 'y') line[0] = line[0] == 'u' ? 'U' : 'Y';
      out("%d %s %s\n", t->run, line, res);
    }
  }
  t->pend[0] = 0;
  resume(t, 0);
}

static void on_new_child(struct task *parent, pid_t child, int event) {
  struct run *r = run_of(parent->run);
  struct task *c = add(child, parent->run);
  c->sandboxed = parent->sandboxed;
  int thread = (parent->clone_flags & CLONE_THREAD) != 0 && event == PTRACE_EVENT_CLONE;
  if (r) r->live++;
  if (parent->sandboxed) out("%d F %d %d %c\n", parent->run, parent->pid, child, thread ? 't' : 'p');
  if (take_early(child)) ptrace(PTRACE_CONT, child, 0, 0);
  else c->initial_stop = 1;
}

// bwrap's --dev binds the host's own device nodes in (/dev/null, ...), and leaves those binds
// writable: its read-only remount would also set nodev, which makes a device unusable. Through them
// a program could set the host nodes' times (`touch /dev/null`). At the run's first exec, a child
// of ours joins the sandbox's mount namespace and remounts each bind read-only, keeping its other
// flags: the device reads and writes as before, and a change of the node fails with EROFS.
// Over /dev/tty it binds /dev/null: the kernel sets the times of every open file of a terminal as it
// is read or written (tty_update_time), past any mount flag, so a program that made a pseudo-terminal
// its controlling one would set the host node's times through its bind. The sandbox has no terminal
// anyway: a prompt written to /dev/tty goes nowhere and its answer is end of file, as from stdin.
// (Not an unmount: that waits for an RCU grace period, up to milliseconds on a busy host, while the
// tracer serves every run.)
static const char *const DEVICE_NODES[] = {"/dev/null", "/dev/zero", "/dev/full", "/dev/random", "/dev/urandom", "/dev/tty"};
struct seal {
  int mnt, user, root; // the sandbox's mount namespace, the user namespace that owns it (or -1), its root
};
// A remount must repeat the flags the mount keeps (the kernel refuses to drop a locked one).
static int remount(const char *path, const struct statvfs *v, unsigned long ro) {
  unsigned long keep = (v->f_flag & ST_NOSUID ? MS_NOSUID : 0) | (v->f_flag & ST_NODEV ? MS_NODEV : 0) | (v->f_flag & ST_NOEXEC ? MS_NOEXEC : 0) |
                       (v->f_flag & ST_NOATIME ? MS_NOATIME : 0) | (v->f_flag & ST_NODIRATIME ? MS_NODIRATIME : 0) | (v->f_flag & ST_RELATIME ? MS_RELATIME : 0);
  return mount(NULL, path, NULL, MS_REMOUNT | MS_BIND | ro | keep, NULL);
}
static int seal_child(void *arg) {
  const struct seal *s = arg;
  if ((s->user >= 0 && setns(s->user, CLONE_NEWUSER) != 0) || setns(s->mnt, CLONE_NEWNS) != 0 || fchdir(s->root) != 0 || chroot(".") != 0) return errno;
  struct statvfs v;
  for (size_t i = 0; i < sizeof DEVICE_NODES / sizeof *DEVICE_NODES; i++) {
    if (statvfs(DEVICE_NODES[i], &v) != 0) {
      if (errno == ENOENT) continue; // not on this host: bwrap made no bind
      return errno;
    }
    if (!(v.f_flag & ST_RDONLY) && remount(DEVICE_NODES[i], &v, MS_RDONLY) != 0) return errno;
  }
  if (access("/dev/tty", F_OK) != 0) return errno == ENOENT ? 0 : errno;
  if (mount("/dev/null", "/dev/tty", NULL, MS_BIND, NULL) != 0 || statvfs("/dev/tty", &v) != 0 || remount("/dev/tty", &v, MS_RDONLY) != 0) return errno;
  return 0;
}
// 0, or an errno. An ordinary user's child must join the sandbox's user namespace to have power over
// its mounts, and so must have memory of its own (fork). Root's has that power already: it shares
// our memory until it exits (vfork: a third of a fork's time, docs/benchmarks.md).
static int seal_device_nodes(pid_t pid) {
  static char stack[64 << 10] __attribute__((aligned(16)));
  char p[64];
  snprintf(p, sizeof p, "/proc/%d/ns/mnt", (int)pid);
  struct seal s = {open(p, O_RDONLY | O_CLOEXEC), -1, -1};
  int root = geteuid() == 0;
  // With --disable-userns the program sits in a user namespace nested in the one that owns the mounts.
  if (s.mnt >= 0 && !root) s.user = ioctl(s.mnt, NS_GET_USERNS);
  // bwrap chroots into the sandbox's root: it is not the namespace's own root, which setns gives.
  snprintf(p, sizeof p, "/proc/%d/root", (int)pid);
  if (s.mnt >= 0 && (root || s.user >= 0)) s.root = open(p, O_PATH | O_DIRECTORY | O_CLOEXEC);
  int err = s.root < 0 ? errno : 0, st = 0;
  pid_t c = err ? -1 : clone(seal_child, stack + sizeof stack, (root ? CLONE_VM | CLONE_VFORK : 0) | SIGCHLD, &s);
  if (c < 0 && !err) err = errno;
  if (c > 0) err = waitpid(c, &st, __WALL) != c ? errno : WIFEXITED(st) ? WEXITSTATUS(st) : EINTR;
  const int fds[] = {s.mnt, s.user, s.root};
  for (size_t i = 0; i < 3; i++)
    if (fds[i] >= 0) close(fds[i]);
  return err;
}

static void on_exec(struct task *t) {
  unsigned long former = 0;
  ptrace(PTRACE_GETEVENTMSG, t->pid, 0, &former);
  // A non-leader thread that execs takes the leader's pid: its pending path is under its old tid.
  if ((pid_t)former != t->pid) {
    struct task *f = find((pid_t)former);
    if (f) {
      free(t->exec_path);
      t->exec_path = f->exec_path;
      f->exec_path = NULL;
      struct run *r = run_of(f->run);
      drop((pid_t)former);
      if (r) r->live--;
    }
  }
  struct run *r = run_of(t->run);
  t->sandboxed = 1;
  if (r && r->program == 0) {
    r->program = t->pid;
    out("%d P %d\n", t->run, t->pid);
    // bwrap's set-up is done (its first exec), and nothing of the program has run yet.
    int sealed = seal_device_nodes(t->pid);
    if (sealed != 0) {
      out("%d M err %d\n", t->run, sealed);
      kill(t->pid, SIGKILL);
    }
  }
  // The file the kernel now runs: one with no name in any filesystem (a memfd, an O_TMPFILE, a deleted
  // file) is an anonymous executable, whatever path (or fd) the program named it by.
  char exe[64], name[PATH_CAP], anon[2 * PATH_CAP + 1] = "-";
  struct stat st;
  snprintf(exe, sizeof exe, "/proc/%d/exe", t->pid);
  if (stat(exe, &st) == 0 && st.st_nlink == 0) {
    ssize_t n = readlink(exe, name, sizeof name - 1);
    if (n <= 0) name[n = 0] = 0;
    hex(anon, (const unsigned char *)name, (size_t)n);
    if (n == 0) strcpy(anon, "3f"); // "?": nameless even to the kernel
  }
  out("%d X %d %s %s\n", t->run, t->pid, t->exec_path && *t->exec_path ? t->exec_path : "-", anon);
}

static void on_gone(pid_t pid, int status) {
  drop_deferred(pid);
  struct task *t = find(pid);
  if (!t) {
    if (!on_launch_gone(pid, status)) take_early(pid);
    return;
  }
  int id = t->run;
  struct run *r = run_of(id);
  if (r && r->program == pid) {
    if (WIFEXITED(status)) out("%d E %d %d -\n", id, pid, WEXITSTATUS(status));
    else out("%d E %d - %d\n", id, pid, WTERMSIG(status));
  }
  if (t->sandboxed) out("%d Q %d\n", id, pid);
  drop(pid);
  if (r) {
    r->live--;
    maybe_finish(r);
  }
}

static void on_wait(pid_t pid, int status) {
  if (WIFEXITED(status) || WIFSIGNALED(status)) return on_gone(pid, status);
  if (!WIFSTOPPED(status)) return;
  struct task *t = find(pid);
  int sig = WSTOPSIG(status), event = (unsigned)status >> 16;
  if (!t) {
    // A new child stopped before its parent's fork event was read: hold it until we know its run.
    if (nearly < MAX_EARLY) early[nearly++] = pid;
    else ptrace(PTRACE_CONT, pid, 0, 0);
    return;
  }
  switch (event) {
  case PTRACE_EVENT_SECCOMP: return on_seccomp(t);
  case PTRACE_EVENT_FORK:
  case PTRACE_EVENT_VFORK:
  case PTRACE_EVENT_CLONE: {
    unsigned long child = 0;
    if (ptrace(PTRACE_GETEVENTMSG, pid, 0, &child) == 0 && child > 0) on_new_child(t, (pid_t)child, event);
    return resume(t, 0);
  }
  case PTRACE_EVENT_EXEC:
    on_exec(t);
    return resume(t, 0);
  case PTRACE_EVENT_STOP:
    t->initial_stop = 0;
    if (sig == SIGSTOP || sig == SIGTSTP || sig == SIGTTIN || sig == SIGTTOU) ptrace(PTRACE_LISTEN, pid, 0, 0);
    else resume(t, 0);
    return;
  case 0:
    if (sig == (SIGTRAP | 0x80)) return on_syscall_exit(t);
    if (sig == SIGSYS && t->sandboxed) {
      siginfo_t si;
      if (ptrace(PTRACE_GETSIGINFO, pid, 0, &si) == 0 && si.si_code == SYS_SECCOMP_CODE)
        out("%d T %d %d %u\n", t->run, pid, si.si_syscall, si.si_arch);
    }
    return resume(t, sig);
  default: return resume(t, 0);
  }
}

// ---- launches -----------------------------------------------------------------------------------

// A launch is one bwrap started by us for a run (the `R` request). Its parts, in order:
//   1. FIFOs <stdout> and <stderr> (mode 0600, in node's staging dir, root-owned as root). The child's open for
//      writing blocks until node has opened its reader (node does on `R ok`): so node's reader always
//      predates the writer and sees its end, and nothing is written before anyone reads.
//   2. fork; the child joins the run's cgroups, sets its rlimits (bwrap and everything below inherit
//      them), wires fds 0..5 (stdin an empty pipe, the FIFOs, --info-fd 3, --block-fd 4, --seccomp 5),
//      closes every other fd, drops to uid:gid with no groups but `group` and execs bwrap. A failed step is written
//      to a close-on-exec status pipe: EOF there means the exec happened.
//   3. bwrap reports its init's pid on fd 3; we set the init's RLIMIT_NPROC when asked and
//      PTRACE_SEIZE it while it is blocked on fd 4, then
//      let it go (or, for a held launch, wait for `G`: node starts the network bridge first).
// Run by an ordinary user (no root), the tracer traces that user's own sandboxes: bwrap starts as the
// user, and nothing else changes (the init is its descendant, so yama's ptrace_scope 1 allows it).
// Node pays neither its own fork (~2-3 ms for a large process) nor a round trip per step.
struct launch {
  pid_t pid;          // bwrap (not traced: only its init and what the init starts are)
  int reaped;
  int info_fd, block_fd, status_fd;
  int params_fd; // a held launcher: where its launch request goes (-1 once sent)
  int held;      // a launcher waiting for its run (`H`), not yet taken by an `R`
  int hold, traced;
  long nproc;         // set on the init before it is traced (see launch_req)
  unsigned uid, gid;  // the ids bwrap runs as (set_nproc)
  char info[512];
  size_t info_len;
};

static struct launch launches[MAX_RUNS];

static void close_fd(int *fd) {
  if (*fd >= 0) close(*fd);
  *fd = -1;
}

// The run is over when bwrap was reaped and every traced task is gone: `Z` is its last line.
static void maybe_finish(struct run *r) {
  struct launch *l = &launches[r - runs];
  if (!r->in_use || !l->reaped || r->live > 0) return;
  out("%d Z\n", r->id);
  close_fd(&l->info_fd);
  close_fd(&l->block_fd);
  close_fd(&l->status_fd);
  close_fd(&l->params_fd);
  if (r->root1 > 0) close(r->root1 - 1);
  r->root1 = 0;
  r->in_use = 0;
}

// A request field: `x` then the hex of its bytes (so an empty string is still a field), decoded in place.
// Linear in the field's length (sscanf("%2x") per byte pair rescanned the rest of the line each time:
// quadratic, ~0.5 s for a 400 kB request).
static int nibble(char c) {
  return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}
static int unhex(char *h) {
  if (h[0] != 'x') return -1;
  size_t n = strlen(h + 1);
  if (n % 2) return -1;
  for (size_t i = 0; i < n / 2; i++) {
    int hi = nibble(h[1 + 2 * i]), lo = nibble(h[2 + 2 * i]);
    if (hi < 0 || lo < 0 || (hi | lo) == 0) return -1;
    h[i] = (char)(hi << 4 | lo);
  }
  h[n / 2] = 0;
  return (int)(n / 2);
}

static void child_fail(int status_fd, const char *step) {
  char b[64];
  int n = snprintf(b, sizeof b, "%s %d", step, errno);
  if (write(status_fd, b, (size_t)n) < 0) _exit(126);
  _exit(127);
}

struct launch_req {
  int id, hold;
  long cpu_soft, cpu_hard;
  long long fsize;
  long long as_bytes; // RLIMIT_AS (-1: none), the memory backstop where no cgroup counts memory
  long nproc;         // RLIMIT_NPROC on bwrap's init (-1: none), the processes backstop where no cgroup counts them
  unsigned uid, gid;
  unsigned group;                     // one supplementary group (the sandbox user's: what a scope's owner shares), 0: none
  char *fifo[2], *seccomp, *cgroups; // cgroups: cgroup.procs paths, newline-separated ("" for none)
  int held_slot;                      // > 0: started by the launcher held in that slot (`h<slot>`)
  char **argv;
};

// Closes every fd from `lo` on (close_range where the kernel has it).
static void close_from(unsigned lo, unsigned hi) {
  if (lo > hi) return;
  if (syscall(SYS_close_range, lo, hi, 0) != 0)
    for (unsigned fd = lo; fd <= hi && fd < 65536; fd++) close((int)fd);
}

// Closes every fd but `keep` (n of them, at most 4): nothing of ours (node's pipes, other runs' pipes,
// FIFOs, a held launcher's request pipe) stays in a launcher a moment longer than its fork.
static void close_all_but(const int *fds, int n) {
  int keep[4];
  memcpy(keep, fds, sizeof(int) * (size_t)n);
  for (int i = 1; i < n; i++)
    for (int j = i; j > 0 && keep[j] < keep[j - 1]; j--) {
      int t = keep[j];
      keep[j] = keep[j - 1];
      keep[j - 1] = t;
    }
  unsigned lo = 0;
  for (int i = 0; i < n; i++) {
    if ((unsigned)keep[i] > lo) close_from(lo, (unsigned)keep[i] - 1);
    lo = (unsigned)keep[i] + 1;
  }
  close_from(lo, ~0U);
}

// Joins the run's cgroups (every process of the run is born inside).
static void join_cgroups(char *cgroups, int status_w) {
  char pid[24];
  int pl = snprintf(pid, sizeof pid, "%d", getpid());
  for (char *p = cgroups; *p;) {
    char *nl = strchr(p, '\n');
    if (nl) *nl = 0;
    int fd = open(p, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, pid, (size_t)pl) != pl) child_fail(status_w, "cgroup");
    close(fd);
    if (!nl) break;
    p = nl + 1;
  }
}

// In the child, between fork and exec: only async-signal-safe calls.
static void child_exec(const struct launch_req *q, int info_w, int block_r, int status_w) {
  sigset_t none;
  sigemptyset(&none);
  sigprocmask(SIG_SETMASK, &none, NULL);
  signal(SIGPIPE, SIG_DFL);
  const int mine[3] = {info_w, block_r, status_w};
  close_all_but(mine, 3);
  join_cgroups(q->cgroups, status_w);
  struct rlimit cpu = {(rlim_t)q->cpu_soft, (rlim_t)q->cpu_hard}, core = {0, 0}, fs = {(rlim_t)q->fsize, (rlim_t)q->fsize},
                as = {(rlim_t)q->as_bytes, (rlim_t)q->as_bytes};
  if (setrlimit(RLIMIT_CPU, &cpu) != 0 || setrlimit(RLIMIT_CORE, &core) != 0 || (q->fsize >= 0 && setrlimit(RLIMIT_FSIZE, &fs) != 0) ||
      (q->as_bytes >= 0 && setrlimit(RLIMIT_AS, &as) != 0))
    child_fail(status_w, "rlimit");
  int src[7];
  // stdin: an empty pipe, not the host's /dev/null. A descriptor of a host file would let the
  // program change that file (futimens(0) sets /dev/null's times) past every mount of the sandbox.
  // It is the sandbox uid's, so that the program can reopen it (`cat /dev/stdin`) as it could /dev/null.
  int empty[2];
  if (pipe2(empty, O_CLOEXEC) != 0 || (geteuid() == 0 && fchown(empty[0], q->uid, q->gid) != 0)) child_fail(status_w, "fds");
  close(empty[1]);
  src[0] = empty[0];
  src[1] = open(q->fifo[0], O_WRONLY | O_CLOEXEC);
  src[2] = open(q->fifo[1], O_WRONLY | O_CLOEXEC);
  src[3] = info_w;
  src[4] = block_r;
  src[5] = open(q->seccomp, O_RDONLY | O_CLOEXEC);
  src[6] = status_w;
  for (int i = 0; i < 7; i++)
    if (src[i] < 0) child_fail(status_w, "fds");
  // Out of the way of 0..6 first, so no dup2 below overwrites a source still to be placed.
  for (int i = 0; i < 7; i++)
    if ((src[i] = fcntl(src[i], F_DUPFD_CLOEXEC, 64)) < 0) child_fail(status_w, "fds");
  status_w = src[6];
  for (int i = 0; i < 6; i++)
    if (dup2(src[i], i) != i) child_fail(status_w, "fds");
  if (dup3(status_w, 6, O_CLOEXEC) != 6) child_fail(status_w, "fds");
  status_w = 6;
  // Nothing else of ours (node's pipes, other runs' fds) may reach the sandbox.
  close_from(7, ~0U);
  if (geteuid() != 0) {
    // An ordinary user's tracer starts bwrap as that user, with their groups: it can be no one else.
    if (getuid() != q->uid || getgid() != q->gid || getegid() != q->gid || q->group != 0) {
      errno = EPERM;
      child_fail(status_w, "ids");
    }
  } else {
    gid_t group = q->group, seen[2];
    if (setgroups(q->group ? 1 : 0, &group) != 0 || setresgid(q->gid, q->gid, q->gid) != 0 || setresuid(q->uid, q->uid, q->uid) != 0) child_fail(status_w, "ids");
    int ng = getgroups(2, seen);
    if (getuid() != q->uid || geteuid() != q->uid || getgid() != q->gid || ng != (q->group ? 1 : 0) || (ng == 1 && seen[0] != group)) child_fail(status_w, "ids");
  }
  char *envp[] = {"PATH=/usr/bin:/bin", "LC_ALL=C", NULL};
  execve(q->argv[0], q->argv, envp);
  child_fail(status_w, "exec");
}

// A free slot for a new launch (or NULL), after `busy` was told for an id in use or no room.
static struct run *new_slot(int id) {
  struct run *r = NULL;
  for (int i = 0; i < MAX_RUNS && !r; i++)
    if (!runs[i].in_use) r = &runs[i];
  if (!r || run_of(id)) {
    out("%d R err busy %d\n", id, r ? EEXIST : EAGAIN);
    return NULL;
  }
  memset(&launches[r - runs], 0, sizeof launches[0]);
  struct launch *l = &launches[r - runs];
  l->info_fd = l->block_fd = l->status_fd = l->params_fd = -1;
  r->id = id;
  r->live = 0;
  r->program = 0;
  r->nproc_backstop = 0;
  return r;
}

// Forks the launcher of slot `r` with its info, block and status pipes (and, held, the pipe its
// request comes on); the child runs `child`. 0, or the failed step's name.
static const char *fork_launcher(struct run *r, int held, void (*child)(void *, int, int, int, int), void *arg) {
  struct launch *l = &launches[r - runs];
  int info[2] = {-1, -1}, block[2] = {-1, -1}, status[2] = {-1, -1}, params[2] = {-1, -1};
  const char *step = "pipe";
  if (pipe2(info, O_CLOEXEC) != 0 || pipe2(block, O_CLOEXEC) != 0 || pipe2(status, O_CLOEXEC) != 0 || (held && pipe2(params, O_CLOEXEC) != 0)) goto fail;
  step = "fork";
  pid_t pid = fork();
  if (pid < 0) goto fail;
  if (pid == 0) child(arg, info[1], block[0], status[1], params[0]);
  close(info[1]);
  close(block[0]);
  close(status[1]);
  if (held) close(params[0]);
  fcntl(info[0], F_SETFL, O_NONBLOCK);
  fcntl(status[0], F_SETFL, O_NONBLOCK);
  if (held) fcntl(params[1], F_SETFL, O_NONBLOCK);
  l->pid = pid;
  l->info_fd = info[0];
  l->block_fd = block[1];
  l->status_fd = status[0];
  l->params_fd = params[1];
  l->held = held;
  r->in_use = 1;
  return NULL;
fail:
  for (int i = 0; i < 2; i++) {
    close_fd(&info[i]);
    close_fd(&block[i]);
    close_fd(&status[i]);
    close_fd(&params[i]);
  }
  return step;
}

static void exec_child(void *q, int info_w, int block_r, int status_w, int params_r) {
  (void)params_r;
  child_exec(q, info_w, block_r, status_w);
}

// NULL, or the failed step's name.
static const char *make_fifos(const struct launch_req *q) {
  for (int i = 0; i < 2; i++)
    if (mkfifo(q->fifo[i], 0600) != 0) return "fifo";
  return NULL;
}

static void launch(struct launch_req *q, int fifos_made) {
  struct run *r = new_slot(q->id);
  if (!r) return;
  const char *step = fifos_made ? NULL : make_fifos(q);
  if (!step) step = fork_launcher(r, 0, exec_child, q);
  if (step) {
    out("%d R err %s %d\n", q->id, step, errno);
    return;
  }
  launches[r - runs].hold = q->hold;
  launches[r - runs].nproc = q->nproc;
  r->nproc_backstop = q->nproc >= 0;
  launches[r - runs].uid = q->uid;
  launches[r - runs].gid = q->gid;
  out("%d R ok %d\n", q->id, launches[r - runs].pid);
}

// ---- held launchers ----------------------------------------------------------------------------

// Moving a process into a cgroup write-locks the kernel's threadgroup rwsem, and without favordynmods
// the first such write after a pause waits for an RCU grace period (5-25 ms measured). A held
// launcher pays that ahead of need: forked on `H`, it closes every fd but its four pipes (nothing of
// ours or of other runs may wait with it), moves itself into the slot's fresh cgroups and blocks on
// its request pipe. An `R` naming it (`h<slot>`) makes the FIFOs, writes the request, decoded, to
// that pipe and gives the slot the run's id; the launcher goes on as a forked launcher does, from the
// rlimits on. EOF before any request: node let it go, it exits.

// The request a held launcher gets: a 4-byte length, then `<hold> <cpuSoft> <cpuHard> <fsize> <as> <uid>
// <gid>:<group> <argc>`, NUL, and the FIFOs, the seccomp file and argv, each NUL-terminated: decoded by the
// tracer already (outside the run's cgroup), read by length (never until EOF: a launcher forked
// meanwhile may still hold a copy of the pipe's write end until its own close_all_but).
static char held_req[IBUF_CAP];

static int read_full(int fd, char *buf, size_t n) {
  for (size_t got = 0; got < n;) {
    ssize_t k = read(fd, buf + got, n - got);
    if (k == 0 || (k < 0 && errno != EINTR)) return -1;
    if (k > 0) got += (size_t)k;
  }
  return 0;
}

static int unpack_request(char *b, size_t len, struct launch_req *q) {
  static char *argv[MAX_ARGS + 1];
  memset(q, 0, sizeof *q);
  char *end = b + len, *p = memchr(b, 0, len);
  int argc;
  if (!p || sscanf(b, "%d %ld %ld %lld %lld %u %u:%u %d", &q->hold, &q->cpu_soft, &q->cpu_hard, &q->fsize, &q->as_bytes, &q->uid, &q->gid, &q->group, &argc) != 9) return -1;
  if (argc <= 0 || argc > MAX_ARGS || q->uid == 0 || q->gid == 0) return -1;
  char *f[3];
  for (int i = 0; i < 3 + argc; i++) {
    char *s = ++p;
    if (s >= end || !(p = memchr(s, 0, (size_t)(end - s)))) return -1;
    if (i < 3) f[i] = s;
    else argv[i - 3] = s;
  }
  argv[argc] = NULL;
  q->fifo[0] = f[0];
  q->fifo[1] = f[1];
  q->seccomp = f[2];
  q->cgroups = (char *)"";
  q->argv = argv;
  return 0;
}

static void held_child(void *cgroups, int info_w, int block_r, int status_w, int params_r) {
  const int mine[4] = {info_w, block_r, status_w, params_r};
  close_all_but(mine, 4);
  join_cgroups(cgroups, status_w);
  uint32_t len;
  if (read_full(params_r, (char *)&len, sizeof len) != 0) _exit(0); // node let it go unused
  if (len == 0 || len > sizeof held_req || read_full(params_r, held_req, len) != 0) child_fail(status_w, "params");
  close(params_r);
  struct launch_req q;
  if (unpack_request(held_req, len, &q) != 0) child_fail(status_w, "request");
  child_exec(&q, info_w, block_r, status_w);
}

// What a held launcher reads: see held_req. 0 when it does not fit.
static size_t pack_request(const struct launch_req *q, char *b, size_t cap) {
  int argc = 0;
  while (q->argv[argc]) argc++;
  int n = snprintf(b + 4, cap - 4, "%d %ld %ld %lld %lld %u %u:%u %d", q->hold, q->cpu_soft, q->cpu_hard, q->fsize, q->as_bytes, q->uid, q->gid, q->group, argc);
  size_t len = (size_t)n + 1;
  const char *fields[3] = {q->fifo[0], q->fifo[1], q->seccomp};
  for (int i = 0; i < 3 + argc; i++) {
    const char *f = i < 3 ? fields[i] : q->argv[i - 3];
    size_t fl = strlen(f) + 1;
    if (4 + len + fl > cap) return 0;
    memcpy(b + 4 + len, f, fl);
    len += fl;
  }
  uint32_t l32 = (uint32_t)len;
  memcpy(b, &l32, 4);
  return 4 + len;
}

// `H <slot> <hex cgroup.procs paths>`
static void hold_launcher(char *line) {
  static char cgroups[PATH_CAP * 8];
  int id;
  char *save = NULL;
  strtok_r(line, " ", &save);
  char *ids = strtok_r(NULL, " ", &save), *cg = strtok_r(NULL, " ", &save);
  if (!ids || sscanf(ids, "%d", &id) != 1) return;
  if (!cg || unhex(cg) <= 0 || strlen(cg) >= sizeof cgroups) {
    out("%d R err request %d\n", id, EINVAL);
    return;
  }
  strcpy(cgroups, cg);
  struct run *r = new_slot(id);
  if (!r) return;
  const char *step = fork_launcher(r, 1, held_child, cgroups);
  if (step) out("%d R err %s %d\n", id, step, errno);
}

// `C <slot>`: a held launcher no run will take ends now (W and Z follow). Killed by pid, not by its
// cgroup: it may not have joined it yet.
static void cancel_held(int slot) {
  struct run *r = run_of(slot);
  struct launch *l = r ? &launches[r - runs] : NULL;
  if (l && l->held && !l->reaped) kill(l->pid, SIGKILL);
}

// Whether slot `slot` holds a launcher a run can take now.
static struct launch *held_in(int slot) {
  struct run *r = run_of(slot);
  struct launch *l = r ? &launches[r - runs] : NULL;
  return l && l->held && !l->reaped ? l : NULL;
}

// An `R` for a held launcher that is there (on_launch_request checked).
static void launch_held(struct launch_req *q) {
  static char packed[IBUF_CAP];
  struct launch *l = held_in(q->held_slot);
  struct run *r = &runs[l - launches];
  if (run_of(q->id)) {
    out("%d R err busy %d\n", q->id, EEXIST);
    return;
  }
  const char *step = make_fifos(q);
  size_t len = step ? 0 : pack_request(q, packed, sizeof packed);
  if (!step && len == 0) step = "request";
  if (!step && len > 65536 && fcntl(l->params_fd, F_SETPIPE_SZ, (int)len) < 0) step = "params";
  int gone = 0;
  if (!step && write(l->params_fd, packed, len) != (ssize_t)len) {
    step = "params";
    gone = errno == EPIPE; // it died, not yet reaped: the run gets a forked launcher instead
  }
  int e = errno;
  close_fd(&l->params_fd);
  l->held = 0;
  if (gone) return launch(q, 1);
  l->hold = q->hold;
  l->nproc = q->nproc;
  l->uid = q->uid;
  l->gid = q->gid;
  r->id = q->id;
  r->nproc_backstop = q->nproc >= 0;
  if (step) {
    // The launcher cannot have the whole request: it ends now; W and Z follow.
    kill(l->pid, SIGKILL);
    out("%d R err %s %d\n", q->id, step, e);
    return;
  }
  out("%d R ok %d held\n", q->id, l->pid);
}

static void release(struct launch *l) {
  if (l->block_fd < 0) return;
  if (write(l->block_fd, "x", 1) < 0) {
  }
  close_fd(&l->block_fd);
}

// RLIMIT_NPROC on bwrap's init, inside its user namespace: set on bwrap before it made that
// namespace, the limit would count every process of the user on the host. prlimit() on another
// process needs our real ids to be its ids, or CAP_SYS_RESOURCE, which some hosts drop from root (a
// container's default set): as root, the real ids are the init's for the call (the effective ones
// stay root's, so they can be taken back), as the perl helper does on the node path. Meanwhile the
// init's uid could signal us, but nothing of that uid can name this process (the sandbox's pid
// namespace hides it). The raw syscalls change this thread's ids only: glibc's wrappers would make
// every thread change them, waiting on each (close_copy's thread may be inside a long close). 0, or
// -1 with errno.
static int set_ids(long nr, unsigned id) {
  return (int)syscall(nr, (long)id, -1L, -1L);
}
static int set_nproc(pid_t init, const struct launch *l) {
  struct rlimit np = {(rlim_t)l->nproc, (rlim_t)l->nproc};
  if (geteuid() != 0) return prlimit(init, RLIMIT_NPROC, &np, NULL);
  if (set_ids(SYS_setresgid, l->gid) != 0) return -1;
  if (set_ids(SYS_setresuid, l->uid) != 0) {
    int e = errno;
    if (set_ids(SYS_setresgid, 0) != 0) _exit(70);
    errno = e;
    return -1;
  }
  int r = prlimit(init, RLIMIT_NPROC, &np, NULL), e = errno;
  if (set_ids(SYS_setresuid, 0) != 0 || set_ids(SYS_setresgid, 0) != 0 || getuid() != 0 || getgid() != 0) _exit(70); // never go on with the wrong ids
  errno = e;
  return r;
}

// bwrap's --info-fd JSON names its init ("child-pid"); trace it, then let it go unless held.
static void on_info(struct run *r, struct launch *l) {
  ssize_t n = read(l->info_fd, l->info + l->info_len, sizeof l->info - 1 - l->info_len);
  if (n < 0 && errno == EAGAIN) return;
  if (n > 0) l->info_len += (size_t)n;
  l->info[l->info_len] = 0;
  // The object is complete at its `}` (or when bwrap closed the fd, or wrote too much).
  if (n > 0 && !strchr(l->info, '}') && l->info_len < sizeof l->info - 1) return;
  char *k = strstr(l->info, "\"child-pid\"");
  char *colon = k ? strchr(k, ':') : NULL;
  long init = colon ? strtol(colon + 1, NULL, 10) : 0;
  close_fd(&l->info_fd);
  if (init <= 0) return; // bwrap ended (or wrote nonsense) first: its exit tells node
  if (l->nproc >= 0 && set_nproc((pid_t)init, l) != 0) {
    out("%d B err rlimit %d %ld\n", r->id, errno, init);
    return;
  }
  long opts = PTRACE_O_TRACESYSGOOD | PTRACE_O_TRACEFORK | PTRACE_O_TRACEVFORK | PTRACE_O_TRACECLONE |
              PTRACE_O_TRACEEXEC | PTRACE_O_TRACESECCOMP | PTRACE_O_EXITKILL;
  if (find((pid_t)init) || ptrace(PTRACE_SEIZE, (pid_t)init, 0, (void *)opts) != 0) {
    out("%d B err ptrace %d %ld\n", r->id, errno, init);
    return;
  }
  add((pid_t)init, r->id);
  r->live = 1;
  l->traced = 1;
  out("%d B %ld\n", r->id, init);
  if (!l->hold) release(l);
}

static void on_status(struct run *r, struct launch *l) {
  char b[64];
  ssize_t n = read(l->status_fd, b, sizeof b - 1);
  if (n < 0 && errno == EAGAIN) return;
  if (n > 0) {
    b[n] = 0;
    out("%d R err %s\n", r->id, b);
  }
  close_fd(&l->status_fd);
}

// bwrap itself ended: `W <code|-> <signal|->`.
static int on_launch_gone(pid_t pid, int status) {
  for (int i = 0; i < MAX_RUNS; i++) {
    struct launch *l = &launches[i];
    if (!runs[i].in_use || l->pid != pid || l->reaped) continue;
    l->reaped = 1;
    // A failed step's `R err` must reach node before `W`: node reads the exit with the step's error,
    // and without it would wait for the run's FIFOs, which no writer ever opened.
    if (l->status_fd >= 0) on_status(&runs[i], l);
    if (WIFEXITED(status)) out("%d W %d -\n", runs[i].id, WEXITSTATUS(status));
    else out("%d W - %d\n", runs[i].id, WTERMSIG(status));
    close_fd(&l->block_fd);
    maybe_finish(&runs[i]);
    return 1;
  }
  return 0;
}

// ---- requests ----------------------------------------------------------------------------------

static char ibuf[IBUF_CAP];
static size_t ilen;
static int overlong;

// `R <id> <hold> <cpuSoft> <cpuHard> <fsize|-1> <as|-1> <nproc|-1> <uid> <gid[:group]> <hex stdout fifo> <hex stderr fifo>
//  <hex seccomp file> <hex cgroup.procs paths, newline-separated, or -, or h<held slot>> <hex argv>...`;
//  every hex field is `x` followed by the hex digits. Decoded in place into `q`: 0, or -1 (q->id set
//  when it could be read).
static int parse_request(char *line, struct launch_req *q) {
  static char *argv[MAX_ARGS + 1];
  memset(q, 0, sizeof *q);
  q->id = INT_MIN;
  char *save = NULL, *tok[13];
  int nt = 0;
  for (char *t = strtok_r(line, " ", &save); t && nt < 13; t = nt < 13 ? strtok_r(NULL, " ", &save) : NULL) tok[nt++] = t;
  if (nt < 13 || sscanf(tok[1], "%d", &q->id) != 1) return -1;
  if (sscanf(tok[2], "%d", &q->hold) != 1 || sscanf(tok[3], "%ld", &q->cpu_soft) != 1 || sscanf(tok[4], "%ld", &q->cpu_hard) != 1 ||
      sscanf(tok[5], "%lld", &q->fsize) != 1 || sscanf(tok[6], "%lld", &q->as_bytes) != 1 || sscanf(tok[7], "%ld", &q->nproc) != 1 ||
      sscanf(tok[8], "%u", &q->uid) != 1 || sscanf(tok[9], "%u", &q->gid) != 1 ||
      q->cpu_soft <= 0 || q->cpu_hard < q->cpu_soft || q->as_bytes < -1 || q->nproc < -1 || q->uid == 0 || q->gid == 0)
    return -1;
  // `:<group>`: one supplementary group, never root's.
  char *colon = strchr(tok[9], ':');
  if (colon && (sscanf(colon + 1, "%u", &q->group) != 1 || q->group == 0)) return -1;
  // Decoded in place: hex is twice as long as what it encodes.
  char *fields[3] = {tok[10], tok[11], tok[12]};
  for (int i = 0; i < 3; i++)
    if (unhex(fields[i]) < 0) return -1;
  q->fifo[0] = fields[0];
  q->fifo[1] = fields[1];
  q->seccomp = fields[2];
  char *cg = strtok_r(NULL, " ", &save);
  if (!cg) return -1;
  if (cg[0] == 'h') {
    // h<slot>x<hex cgroup.procs paths>: the held launcher, or, when it is gone, a launcher forked into those cgroups.
    char *x = strchr(cg, 'x');
    if (!x || sscanf(cg + 1, "%d", &q->held_slot) != 1 || q->held_slot <= 0) return -1;
    cg = x;
  }
  if (strcmp(cg, "-") == 0) cg[0] = 0;
  else if (unhex(cg) < 0) return -1;
  q->cgroups = cg;
  int na = 0;
  for (char *a = strtok_r(NULL, " ", &save); a; a = strtok_r(NULL, " ", &save)) {
    if (na == MAX_ARGS || unhex(a) < 0) return -1;
    argv[na++] = a;
  }
  if (na == 0) return -1;
  argv[na] = NULL;
  q->argv = argv;
  return 0;
}

static void on_launch_request(char *line) {
  struct launch_req q;
  if (parse_request(line, &q) != 0) {
    if (q.id != INT_MIN) out("%d R err request %d\n", q.id, EINVAL);
  } else if (q.held_slot > 0 && held_in(q.held_slot)) launch_held(&q);
  else launch(&q, 0); // a held launcher that is gone (killed while the run staged): fork one into the same cgroups
}

static void read_requests(void) {
  ssize_t n = read(0, ibuf + ilen, sizeof ibuf - 1 - ilen);
  if (n == 0) {
    // node closed our stdin: end every launch (EXITKILL ends the traced tasks with us).
    for (int i = 0; i < MAX_RUNS; i++)
      if (runs[i].in_use && !launches[i].reaped) kill(launches[i].pid, SIGKILL);
    _exit(0);
  }
  if (n < 0) {
    if (errno == EINTR || errno == EAGAIN) return;
    _exit(2);
  }
  ilen += (size_t)n;
  char *start = ibuf, *nl;
  while ((nl = memchr(start, '\n', ibuf + ilen - start))) {
    *nl = 0;
    int id;
    if (overlong) overlong = 0; // the tail of a line too long to hold: dropped
    else if (start[0] == 'R' && start[1] == ' ') on_launch_request(start);
    else if (start[0] == 'H' && start[1] == ' ') hold_launcher(start);
    else if (sscanf(start, "C %d", &id) == 1) cancel_held(id);
    else if (sscanf(start, "G %d", &id) == 1) {
      struct run *r = run_of(id);
      if (r) release(&launches[r - runs]);
    }
    start = nl + 1;
  }
  ilen = (size_t)(ibuf + ilen - start);
  memmove(ibuf, start, ilen);
  if (ilen == sizeof ibuf - 1) {
    ilen = 0;
    overlong = 1;
  }
}

// One round (see resume): every stop there is, and every exit, is collected; then each run's oldest
// held tasks go on, RUN_SHARE of them. A task resumed but gone meanwhile fails with ESRCH.
static void serve_round(void) {
  int status;
  pid_t pid;
  in_round = 1;
  while ((pid = waitpid(-1, &status, __WALL | WNOHANG)) > 0) on_wait(pid, status);
  in_round = 0;
  static int given[MAX_RUNS];
  memset(given, 0, sizeof given);
  int kept = 0;
  for (int i = 0; i < ndeferred; i++) {
    struct deferred_resume d = deferred[i];
    if (d.slot >= 0 && given[d.slot]++ >= RUN_SHARE) {
      deferred[kept++] = d; // its run had its turns: next round
      continue;
    }
    struct task *t = find(d.pid);
    if (t) t->held = 0;
    ptrace(d.req, d.pid, 0, (void *)(uintptr_t)d.sig);
  }
  ndeferred = kept;
}

int main(void) {
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGCHLD);
  sigprocmask(SIG_BLOCK, &set, NULL);
  signal(SIGPIPE, SIG_IGN);
  int sfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
  if (sfd < 0) return 1;
  out("0 ready\n");
  static struct pollfd fds[2 + 2 * MAX_RUNS];
  static int owner[2 + 2 * MAX_RUNS];
  for (;;) {
    serve_round();
    flush_out();
    int nf = 2;
    fds[0] = (struct pollfd){0, POLLIN, 0};
    fds[1] = (struct pollfd){sfd, POLLIN, 0};
    for (int i = 0; i < MAX_RUNS; i++) {
      if (!runs[i].in_use) continue;
      if (launches[i].info_fd >= 0) owner[nf] = i, fds[nf++] = (struct pollfd){launches[i].info_fd, POLLIN, 0};
      if (launches[i].status_fd >= 0) owner[nf] = i, fds[nf++] = (struct pollfd){launches[i].status_fd, POLLIN, 0};
    }
    // The timeout is a safety net only: SIGCHLD (through the signalfd) wakes us for every stop.
    if (poll(fds, (nfds_t)nf, ndeferred > 0 ? 0 : 200) < 0 && errno != EINTR) return 2;
    if (fds[0].revents & (POLLIN | POLLHUP)) read_requests();
    if (fds[1].revents & POLLIN) {
      struct signalfd_siginfo ssi;
      while (read(sfd, &ssi, sizeof ssi) == (ssize_t)sizeof ssi) {
      }
    }
    for (int k = 2; k < nf; k++) {
      if (!(fds[k].revents & (POLLIN | POLLHUP | POLLERR))) continue;
      struct run *r = &runs[owner[k]];
      struct launch *l = &launches[owner[k]];
      if (!r->in_use) continue;
      if (fds[k].fd == l->info_fd) on_info(r, l);
      else if (fds[k].fd == l->status_fd) on_status(r, l);
    }
  }
}
