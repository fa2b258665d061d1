// Paths in the sandbox's own view, with links resolved as the kernel resolves them there. Included by
// tracer.c (one build unit).
//
// Why: a path is judged by where it leads, not by how it is spelled. Through a link the program made
// (`/tmp/e -> /root`), `/tmp/e/.ssh/id_rsa` is an attempt on /root; through `/proc/self/root`, every
// host-secret place can be spelled under /proc. Lexically both look harmless.
//
// How, at the call's seccomp stop, from descriptors, never from a folder's text: the walk starts at
// the sandbox's root (`/proc/<pid>/root`, opened once a run) for an absolute path, else at the
// program's own cwd or dirfd (`/proc/<pid>/cwd`, `/proc/<pid>/fd/N`, opened through the kernel's
// link: right even when that folder was deleted or its name is longer than a path can be).
// - One openat2(RESOLVE_NO_SYMLINKS) from there tells whether a path without `..` meets a link at
//   all (most do not: then the lexical path is the kernel's). Anything else is walked.
// - The walk opens one component at a time, O_PATH | O_NOFOLLOW from the folder before it, so nothing
//   is followed but what the walk reads and splices itself; `..` is an openat of `..` from the folder
//   it is in, and stays at the top (the sandbox's root; the dirfd for RESOLVE_IN_ROOT/BENEATH).
// - A link of /proc that names a descriptor (cwd, root, fd/N) is followed by the kernel itself
//   (an O_PATH open of it): to a folder the walk goes on from there; at the path's end, to a
//   regular file that still has a name, the call reaches that file (an O_PATH descriptor of
//   /etc/hosts reopened for writing writes /etc/hosts) and is judged by its name; to anything else
//   (a pipe, a socket, a memfd) the call acts on a descriptor the program holds, and the path as
//   written is kept. /proc/self and
//   /proc/thread-self name their reader, so they are read as the program's own pid.
//   /proc/<pid>/map_files is never looked in (LOCKED_NAME). A non-dumpable program's own fd folder,
//   which only root and the program may search, is passed through pidfd_getfd (own_fd).
//   Any other lookup /proc refuses the tracer is a failed walk: a finding, never a missing name.
// - Where it ended is the kernel's name of the last folder reached (/proc/self/fd/N), in the
//   sandbox's view, plus what did not exist after it, as written.
// The program can change a link between this stop and the kernel's own walk; the report is the
// host's best reading, not the containment (the read-only root, the namespaces and the diff are).
#include <signal.h>
#include <sys/time.h>
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/openat2.h>

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif
#define LINK_HOPS 40 // the kernel's MAXSYMLINKS
// Components a walk may open. One tracer serves every run: a program must not make it spend long on
// one call (deep folders named again by each of 40 links). Past it: a finding, not a guess.
#define WALK_BUDGET 256

enum walk { WALK_SAME, WALK_RESOLVED, WALK_FAILED };

// /proc/<pid>/map_files: a lookup in it waits on that process's memory map lock, which a program
// holds for tens of ms with a fork of a big map. The tracer (root) would wait where the program
// (no CAP_SYS_ADMIN) is refused at once: the walk stops there, keeping the path as written.
#define LOCKED_NAME "map_files"

static int has_dotdot(const char *p) {
  for (const char *s = p; (s = strstr(s, "..")); s += 2)
    if ((s == p || s[-1] == '/') && (s[2] == 0 || s[2] == '/')) return 1;
  return 0;
}

// 0: `path`, looked up from `start` (the root, for an absolute path), meets no link on its way as far
// as the kernel's own lookup got; 1: it does, or that cannot be told this way.
static int meets_link(int start, const char *path, int follow_last) {
  while (*path == '/') path++;
  if (!*path) return 0;
  if (strstr(path, LOCKED_NAME)) return 1; // the walk stops there
  struct open_how how = {.flags = O_PATH | O_CLOEXEC | (follow_last ? 0 : O_NOFOLLOW), .resolve = RESOLVE_NO_SYMLINKS};
  int fd = (int)syscall(SYS_openat2, start, path, &how, sizeof how);
  if (fd >= 0) close(fd);
  return fd < 0 && errno != ENOENT && errno != ENOTDIR && errno != ENAMETOOLONG;
}

// The text /proc/self (or /proc/thread-self) has for the task `pid`, in its own pid namespace.
static int proc_self_text(pid_t pid, int thread, char *dst, size_t cap) {
  char file[64], line[256];
  long tgid = -1, tid = -1;
  snprintf(file, sizeof file, "/proc/%d/status", pid);
  FILE *f = fopen(file, "re");
  if (!f) return 0;
  while (fgets(line, sizeof line, f)) {
    // The last number of NStgid/NSpid is the id in the innermost (the sandbox's) namespace.
    char *last = strrchr(line, '\t');
    if (!last) continue;
    if (strncmp(line, "NStgid:", 7) == 0) tgid = strtol(last + 1, NULL, 10);
    else if (strncmp(line, "NSpid:", 6) == 0) tid = strtol(last + 1, NULL, 10);
  }
  fclose(f);
  if (tgid <= 0 || tid <= 0) return 0;
  int n = thread ? snprintf(dst, cap, "%ld/task/%ld", tgid, tid) : snprintf(dst, cap, "%ld", tgid);
  return n > 0 && (size_t)n < cap;
}

// The kernel's name of what `fd` refers to (in the sandbox's view for the sandbox's files).
static ssize_t fd_name(int fd, char *dst, size_t cap) {
  char link[64];
  snprintf(link, sizeof link, "/proc/self/fd/%d", fd);
  ssize_t n = readlink(link, dst, cap - 1);
  if (n >= 0) dst[n] = 0;
  return n;
}

enum link_kind { LINK_TEXT, LINK_DESCRIPTOR, LINK_UNREADABLE };

// The link `fd` (named `name`, in folder `dir`): LINK_TEXT with its text in dst, or LINK_DESCRIPTOR
// for a /proc link that names a descriptor (the kernel follows it, not its text). /proc's plain
// links are in its root only (self, thread-self, mounts, net); every other is a descriptor's (cwd,
// root, exe, fd/N, ns/...), whose text is never read: its name can be as deep as the program's
// folders go, and building it costs the shared tracer.
static enum link_kind link_of(pid_t pid, int fd, int dir, const char *name, char *dst, size_t cap) {
  struct statfs fs;
  struct stat at;
  if (fstatfs(fd, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) {
    if (fstat(dir, &at) != 0 || at.st_ino != 1) return LINK_DESCRIPTOR; // not /proc's root (inode 1)
    if (strcmp(name, "self") == 0 || strcmp(name, "thread-self") == 0)
      return proc_self_text(pid, name[0] == 't', dst, cap) ? LINK_TEXT : LINK_UNREADABLE;
  }
  ssize_t n = readlinkat(fd, "", dst, cap - 1);
  if (n <= 0 || (size_t)n >= cap - 1) return LINK_UNREADABLE;
  dst[n] = 0;
  return LINK_TEXT;
}

// Appends `/name` (n bytes) to `s` (`*len` bytes so far); 0 when it does not fit.
static int put_name(char *s, size_t cap, size_t *len, const char *name, size_t n) {
  if (*len + 1 + n + 1 > cap) return 0;
  s[(*len)++] = '/';
  memcpy(s + *len, name, n);
  *len += n;
  s[*len] = 0;
  return 1;
}

#ifndef SYS_pidfd_open
#define SYS_pidfd_open 434
#endif
#ifndef SYS_pidfd_getfd
#define SYS_pidfd_getfd 438
#endif
#ifndef PIDFD_THREAD
#define PIDFD_THREAD O_EXCL
#endif

// Our copy of a program's descriptor (own_fd, task_fd) can become the file's last reference: in
// pidfd_getfd, when the program closes its own meanwhile, or at our close. Releasing a TCP socket set
// to linger, or a unix socket holding one in flight (SCM_RIGHTS), then waits as long as the program
// asked (an hour, with a peer that never reads), and the tracer's loop with it. A pending signal ends
// that wait (the socket is closed in the background, as the program's own interrupted close() would
// be): those calls run under a 10 ms timer whose signal does nothing else.
static void on_alarm(int sig) { (void)sig; }
static void release_guard(int on) {
  static int ready;
  if (!ready) {
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_alarm;
    sa.sa_flags = SA_RESTART;
    sigaction(SIGALRM, &sa, NULL);
    ready = 1;
  }
  struct itimerval t = {{0, 0}, {0, on ? 10000 : 0}};
  setitimer(ITIMER_REAL, &t, NULL);
}

// Closes a copy of a program's descriptor (see release_guard).
static void close_copy(int fd) {
  release_guard(1);
  close(fd);
  release_guard(0);
}

// An O_PATH descriptor of what `fd` is, of our own (through our /proc/self/fd), or -1.
static int reopen_path(int fd) {
  char at[64];
  snprintf(at, sizeof at, "/proc/self/fd/%d", fd);
  return open(at, O_PATH | O_CLOEXEC);
}

enum { OWN_FD_UNKNOWN = -1, OWN_FD_NONE = -2 };

// A copy of descriptor `n` of process `pid` (of thread `pid` when `thread`), or OWN_FD_NONE (it has
// none) or OWN_FD_UNKNOWN (a kernel before 5.6, or before 6.9 for a thread). A copy that is no
// folder goes to close_copy.
static int copy_fd(pid_t pid, int thread, long n) {
  int pidfd = (int)syscall(SYS_pidfd_open, pid, thread ? PIDFD_THREAD : 0);
  if (pidfd < 0) return OWN_FD_UNKNOWN;
  release_guard(1);
  int fd = (int)syscall(SYS_pidfd_getfd, pidfd, (int)n, 0), e = errno;
  release_guard(0);
  close(pidfd);
  return fd >= 0 ? fd : e == EBADF ? OWN_FD_NONE : OWN_FD_UNKNOWN;
}

// `pid`'s own descriptor `name`, when `dir` is its own fd folder in the sandbox's /proc
// (/proc/<its tgid>/fd, or /proc/<tgid>/task/<its tid>/fd): a copy through pidfd_getfd, which the
// tracer may take where it may not search that folder (a non-dumpable program's is root's, 0500, and
// an ordinary user's tracer is not root: it may ptrace the program, so it may take its descriptors).
// A copy that is no folder goes to close_copy. OWN_FD_NONE: no such name there (the kernel's lookup
// fails with ENOENT); OWN_FD_UNKNOWN: another folder, or not to be had (a kernel before 5.6).
static int own_fd(pid_t pid, int dir, const char *name) {
  char at[PATH_CAP], self[64], want[96], line[256];
  if (fd_name(dir, at, sizeof at) <= 0) return OWN_FD_UNKNOWN;
  int thread = strstr(at, "/task/") != NULL;
  if (!proc_self_text(pid, thread, self, sizeof self)) return OWN_FD_UNKNOWN;
  snprintf(want, sizeof want, "/proc/%s/fd", self);
  if (strcmp(at, want) != 0) return OWN_FD_UNKNOWN;
  // Its names are descriptors' numbers in decimal, without a leading zero ("040" is no name there).
  char *end;
  errno = 0;
  long n = strtol(name, &end, 10);
  if (name[0] < '0' || name[0] > '9' || (name[0] == '0' && name[1]) || *end || errno || n > INT_MAX) return OWN_FD_NONE;
  // The host's id of the process (its tgid), or of the thread itself for its task folder.
  long host = pid;
  if (!thread) {
    snprintf(at, sizeof at, "/proc/%d/status", pid);
    FILE *f = fopen(at, "re");
    host = -1;
    while (f && fgets(line, sizeof line, f))
      if (strncmp(line, "Tgid:", 5) == 0) host = strtol(line + 5, NULL, 10);
    if (f) fclose(f);
    if (host <= 0) return OWN_FD_UNKNOWN;
  }
  return copy_fd((pid_t)host, thread, n);
}

// The /proc link of a task's descriptor `fd` (AT_FDCWD: its cwd), as the kernel follows it.
static void fd_link(pid_t tid, long fd, char link[64]) {
  if ((int)fd == AT_FDCWD) snprintf(link, 64, "/proc/%d/cwd", tid);
  else snprintf(link, 64, "/proc/%d/fd/%d", tid, (int)fd);
}

// What the program's descriptor `fd` (AT_FDCWD: its cwd) refers to, as an O_PATH descriptor of ours:
// through /proc/<tid>/fd/N, or, where the tracer may not search that folder (see own_fd), from a copy.
// OWN_FD_NONE: the task has no such descriptor (the kernel fails the call with EBADF).
static int task_fd(pid_t tid, long fd) {
  char at[64];
  fd_link(tid, fd, at);
  int f = open(at, O_PATH | O_CLOEXEC);
  if (f >= 0) return f;
  if ((int)fd == AT_FDCWD || (errno != ENOENT && errno != EACCES)) return OWN_FD_UNKNOWN;
  if (errno == ENOENT) return OWN_FD_NONE;
  int copy = copy_fd(tid, 1, fd);
  if (copy < 0) return copy;
  f = reopen_path(copy);
  close_copy(copy);
  return f >= 0 ? f : OWN_FD_UNKNOWN;
}

#ifndef MQUEUE_MAGIC
#define MQUEUE_MAGIC 0x19800202
#endif

// Whether what `fd` refers to is reached by a path of the sandbox, under the kernel's name of it (in
// dst): it still has a link (not a memfd, a deleted or an O_TMPFILE file), its name is absolute
// ("pipe:[7]" is not), and it is no FIFO or socket (stdout's FIFO is the host's) nor a POSIX message
// queue (named "/<queue>", on no mount of the sandbox). `regular`: a regular file only. 1: yes; 0: no;
// -1: its name could not be read whole.
static int named_file(int fd, int regular, char *dst, size_t cap) {
  struct stat st;
  struct statfs fs;
  if (fstat(fd, &st) != 0) return -1;
  if (st.st_nlink == 0 || S_ISFIFO(st.st_mode) || S_ISSOCK(st.st_mode) || (regular && !S_ISREG(st.st_mode))) return 0;
  if (fstatfs(fd, &fs) == 0 && fs.f_type == MQUEUE_MAGIC) return 0;
  ssize_t n = fd_name(fd, dst, cap);
  if (n < 0 || (size_t)n >= cap - 1) return -1;
  return n > 0 && dst[0] == '/';
}

// Where a descriptor link (/proc/<pid>/fd/N, cwd, root) leads: a folder the walk goes on from; at the
// path's end, a file a path reaches too (named_file: a regular file, or for a call that changes it
// rather than opens it, also a device or a link), which the call reaches as if by that name (an
// O_PATH descriptor reopened for writing through /proc/self/fd/N writes that file; `touch
// /dev/stdin` sets the times of the host's /dev/null bound there); or anything else, a descriptor the
// program holds (a pipe, a socket, a memfd, stdout's FIFO), kept as written.
enum jump { JUMP_NONE, JUMP_DIR, JUMP_FILE };
static enum jump jump_kind(int fd, int last, int changes) {
  struct stat st;
  char name[PATH_CAP];
  if (fstat(fd, &st) != 0) return JUMP_NONE;
  if (S_ISDIR(st.st_mode)) return JUMP_DIR;
  return last && named_file(fd, !changes, name, sizeof name) == 1 ? JUMP_FILE : JUMP_NONE;
}

static int same_file(int a, int b) {
  struct stat x, y;
  return fstat(a, &x) == 0 && fstat(b, &y) == 0 && x.st_dev == y.st_dev && x.st_ino == y.st_ino;
}

static void set_fd(int *cur, int fd) {
  close(*cur);
  *cur = fd;
}

// Walks `path` one component at a time from `start` (an absolute path, and an absolute link, from
// `top`). WALK_RESOLVED: dst holds where it leads; WALK_SAME: a /proc link to a descriptor that is no
// folder, or more links than the kernel follows (dst untouched); WALK_FAILED: over its budget, too
// long, a link or a folder's name that could not be read.
static enum walk walk_links(pid_t pid, int top, int start, const char *path, int follow_last, int changes, char *dst, size_t cap) {
  char todo[2 * PATH_CAP + 2], target[PATH_CAP], missing[2 * PATH_CAP + 2];
  if (snprintf(todo, sizeof todo, "%s", path) >= (int)sizeof todo) return WALK_FAILED;
  size_t ml = 0, hops = 0, opened = 0; // missing: what did not open, from there on as written
  int cur = fcntl(path[0] == '/' ? top : start, F_DUPFD_CLOEXEC, 0);
  if (cur < 0) return WALK_FAILED;
  enum walk r = WALK_RESOLVED;
  missing[0] = 0;
  for (char *p = todo;;) {
    while (*p == '/') p++;
    if (!*p) break;
    char *name = p;
    while (*p && *p != '/') p++;
    size_t n = (size_t)(p - name);
    int last = *p == 0; // `name/` (a trailing slash) follows a link like any folder on the way
    if (n == 1 && name[0] == '.') continue;
    if (ml > 0 || (last && !follow_last && !(n == 2 && name[0] == '.' && name[1] == '.'))) {
      if (n == 2 && name[0] == '.' && name[1] == '.') {
        while (ml > 0 && missing[--ml] != '/') {}
        missing[ml] = 0;
      } else if (!put_name(missing, sizeof missing, &ml, name, n)) {
        r = WALK_FAILED;
        break;
      }
      continue;
    }
    if (++opened > WALK_BUDGET) {
      r = WALK_FAILED;
      break;
    }
    char saved = *p;
    *p = 0;
    if (n == 2 && name[0] == '.' && name[1] == '.') {
      *p = saved;
      if (same_file(cur, top)) continue; // `..` stays at the top
      int up = openat(cur, "..", O_PATH | O_CLOEXEC | O_DIRECTORY);
      if (up < 0) {
        r = WALK_FAILED;
        break;
      }
      set_fd(&cur, up);
      continue;
    }
    struct stat st;
    struct statfs fs;
    if (strcmp(name, LOCKED_NAME) == 0 && fstatfs(cur, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) {
      *p = saved;
      r = WALK_SAME;
      break;
    }
    int fd = openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC);
    // In /proc, what the tracer may not look up the program may (its own fd folder once it made itself
    // non-dumpable: root's, 0500, and an ordinary user's tracer is not root). Its own descriptor is
    // taken as the kernel's jump would reach it; anything else cannot be told.
    if (fd < 0 && errno != ENOENT && errno != ENOTDIR && fstatfs(cur, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) {
      int to = own_fd(pid, cur, name);
      *p = saved;
      if (to == OWN_FD_NONE) {
        if (put_name(missing, sizeof missing, &ml, name, n)) continue;
        r = WALK_FAILED;
        break;
      }
      if (to < 0) {
        r = WALK_FAILED;
        break;
      }
      enum jump j = ++hops > LINK_HOPS ? JUMP_NONE : jump_kind(to, last, changes);
      if (j != JUMP_DIR) {
        // A file's own descriptor, not the copy (close_copy), names it.
        int named = j == JUMP_FILE ? reopen_path(to) : -1;
        close_copy(to);
        if (named < 0) {
          r = WALK_SAME; // the call acts on a descriptor the program holds, or fails
          break;
        }
        set_fd(&cur, named);
        break;
      }
      set_fd(&cur, to);
      continue;
    }
    if (fd < 0 || fstat(fd, &st) != 0 || !S_ISLNK(st.st_mode)) {
      *p = saved;
      if (fd >= 0) set_fd(&cur, fd);
      else if (!put_name(missing, sizeof missing, &ml, name, n)) {
        r = WALK_FAILED;
        break;
      }
      continue;
    }
    enum link_kind k = link_of(pid, fd, cur, name, target, sizeof target);
    if (k == LINK_DESCRIPTOR) {
      // The kernel's own jump: where the program's descriptor (or cwd, or root) is.
      int to = openat(cur, name, O_PATH | O_CLOEXEC);
      *p = saved;
      close(fd);
      enum jump j = ++hops > LINK_HOPS || to < 0 ? JUMP_NONE : jump_kind(to, last, changes);
      if (j == JUMP_NONE) {
        if (to >= 0) close(to);
        r = WALK_SAME; // the call acts on a descriptor the program holds, or fails
        break;
      }
      set_fd(&cur, to);
      if (j == JUMP_FILE) break;
      continue;
    }
    close(fd);
    *p = saved;
    // More links than the kernel follows: it fails the call (ELOOP) and nothing is reached.
    if (k == LINK_UNREADABLE || ++hops > LINK_HOPS) {
      r = k == LINK_UNREADABLE ? WALK_FAILED : WALK_SAME;
      break;
    }
    // Go on with the link's text and what was left after it; an absolute one starts at the top. A link
    // at the end adds no `/`: that would make its target's last component a folder on the way.
    char rest[2 * PATH_CAP + 2];
    if (snprintf(rest, sizeof rest, *p ? "%s/%s" : "%s", target, p) >= (int)sizeof rest) {
      r = WALK_FAILED;
      break;
    }
    memcpy(todo, rest, strlen(rest) + 1);
    p = todo;
    if (target[0] == '/') {
      int t = fcntl(top, F_DUPFD_CLOEXEC, 0);
      if (t < 0) {
        r = WALK_FAILED;
        break;
      }
      set_fd(&cur, t);
    }
  }
  if (r == WALK_RESOLVED) {
    ssize_t n = fd_name(cur, dst, cap);
    size_t len = n > 0 ? (size_t)n : 0;
    if (n <= 0 || dst[0] != '/' || len + ml + 1 > cap) r = WALK_FAILED;
    else {
      if (len == 1) len = 0; // the root: "/" + "/x" would be "//x"
      memcpy(dst + len, missing, ml + 1);
      if (dst[0] == 0) snprintf(dst, cap, "/");
    }
  }
  close(cur);
  return r;
}

// Where `path` (as the program wrote it) leads inside the sandbox: from `start` (its cwd or dirfd)
// when relative, from `top` when absolute (the sandbox's root, or the dirfd of an openat2 with
// RESOLVE_IN_ROOT or RESOLVE_BENEATH: `in_root`). WALK_SAME: it meets no link, or none that leads
// to a path (dst untouched: judge the path as written); WALK_RESOLVED: dst holds it; WALK_FAILED:
// the host could not tell (a finding).
static enum walk sandbox_path(pid_t pid, int top, int start, int in_root, const char *path, int follow_last, int changes, char *dst, size_t cap) {
  if (top < 0 || start < 0) return WALK_FAILED;
  if (!in_root && !has_dotdot(path) && !meets_link(path[0] == '/' ? top : start, path, follow_last)) return WALK_SAME;
  return walk_links(pid, top, start, path, follow_last, changes, dst, cap);
}
