// airlock-idmap: a scope's overlay over an idmapped clone of it, for runs with a uid of their own.
//
// A run that may write a declared scope has a host uid of its own, yet the scope's files owned by the
// sandbox user must stay its to write (in its overlay). So the overlay's lower dir is an idmapped
// clone of the scope root in which uid <from> (the sandbox user) is uid <to> (the run) and every
// other id is itself (src/sandbox/ns/scopes.ts). From Linux 6.15 the clone is never attached
// anywhere: the overlay takes it as /proc/self/fd/<its descriptor> and keeps its own private copy, and
// the descriptor is closed at once. Before 6.15 an overlay takes no detached layer: the clone is then
// attached for the mount's time in a folder only root may enter, and detached at once. Either way
// nothing on the host can reach it once the overlay is mounted. The idmap needs a user namespace
// holding that mapping: a child made with clone(CLONE_NEWUSER) holds it while we write its maps,
// killed once the mount has its own reference. In C because perl's fork of itself cost ~2 ms and
// slowed the run it served; this child costs 0.2-0.6 ms (docs/benchmarks.md).
//
// Protocol: the host helpers' (src/sandbox/ns/hostops.ts): requests `<id> <op> <hex field>...` on
// stdin, answers `<id> <errno> <hex message>` (errno 0: done). Exits on stdin EOF.
//   O source upper work merged ro from to   the overlay (read-only when ro is 1; metacopy and
//                                           redirect_dir off, as the perl helper's) on merged, its
//                                           lower dir the idmapped clone (read-only, nosuid, nodev) of
//                                           source's tree, not its submounts. Numbers are decimal,
//                                           hex-encoded like the rest.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#ifndef SYS_open_tree
#define SYS_open_tree 428
#endif
#ifndef SYS_move_mount
#define SYS_move_mount 429
#endif
#ifndef SYS_mount_setattr
#define SYS_mount_setattr 442
#endif
#define OPEN_TREE_CLONE_ 1
#define MOVE_MOUNT_F_EMPTY_PATH_ 0x4
#define MOUNT_ATTR_RDONLY_ 0x1
#define MOUNT_ATTR_NOSUID_ 0x2
#define MOUNT_ATTR_NODEV_ 0x4
#define MOUNT_ATTR_IDMAP_ 0x100000

struct mount_attr_ {
  uint64_t attr_set, attr_clr, propagation, userns_fd;
};

static char why[512];
// AIRLOCK_IDMAP_ATTACH=1: always the attached way (tests of it on kernels that need it not).
static int attach_only;
static int why_errno; // the errno of the step named in `why` (later calls may change errno)

static int nibble(char c) {
  if (c >= '0' && c <= '9') return c - '0';
  if (c >= 'a' && c <= 'f') return c - 'a' + 10;
  if (c >= 'A' && c <= 'F') return c - 'A' + 10;
  return -1;
}

// Strict and linear: hex digits only (sscanf's %2x took signs and blanks: "-1" was 0xff), no NUL inside.
static int unhex(char *h) {
  size_t n = strlen(h);
  if (n % 2) return -1;
  for (size_t i = 0; i < n / 2; i++) {
    int hi = nibble(h[2 * i]), lo = nibble(h[2 * i + 1]);
    if (hi < 0 || lo < 0 || (hi | lo) == 0) return -1;
    h[i] = (char)(hi << 4 | lo);
  }
  h[n / 2] = 0;
  return 0;
}

// Decimal digits only (strtoul alone takes blanks and a sign).
static int parse_id(const char *s, unsigned long *out) {
  if (!*s || strspn(s, "0123456789") != strlen(s)) return -1;
  char *end;
  errno = 0;
  unsigned long v = strtoul(s, &end, 10);
  if (errno || *end || v >= 4294967295UL) return -1;
  *out = v;
  return 0;
}

static int fail(const char *step) {
  why_errno = errno;
  snprintf(why, sizeof why, "%s: %s", step, strerror(why_errno));
  return why_errno;
}

static int holder(void *helper) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (getppid() != (pid_t)(intptr_t)helper) _exit(0); // the helper died before the line above (reparented: to init or a subreaper)
  for (;;) pause();
  return 0;
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  int e = errno;
  close(fd);
  errno = e;
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/** The idmapped clone of `source` (uid `from` seen as `to`; every other id as itself except `to`, which nothing maps to): a descriptor, or -1. */
static int idmapped_tree(const char *source, unsigned long from, unsigned long to) {
  static char stack[64 * 1024] __attribute__((aligned(16)));
  pid_t pid = clone(holder, stack + sizeof stack, CLONE_NEWUSER | SIGCHLD, (void *)(intptr_t)getpid());
  if (pid < 0) return fail("clone(CLONE_NEWUSER)"), -1;
  int ns = -1, tree = -1;
  char path[64], map[256];
  const unsigned long max = 4294967295UL;
  int n = snprintf(map, sizeof map, "0 0 %lu\n%lu %lu 1\n", from, from, to);
  if (to - from - 1 > 0) n += snprintf(map + n, sizeof map - n, "%lu %lu %lu\n", from + 1, from + 1, to - from - 1);
  if (max - to - 1 > 0) snprintf(map + n, sizeof map - n, "%lu %lu %lu\n", to + 1, to + 1, max - to - 1);
  snprintf(path, sizeof path, "/proc/%d/uid_map", pid);
  if (write_file(path, map) < 0) {
    fail("uid_map");
    goto out;
  }
  snprintf(path, sizeof path, "/proc/%d/gid_map", pid);
  if (write_file(path, "0 0 4294967295\n") < 0) {
    fail("gid_map");
    goto out;
  }
  snprintf(path, sizeof path, "/proc/%d/ns/user", pid);
  if ((ns = open(path, O_RDONLY | O_CLOEXEC)) < 0) {
    fail("the user namespace");
    goto out;
  }
  if ((tree = (int)syscall(SYS_open_tree, AT_FDCWD, source, OPEN_TREE_CLONE_ | O_CLOEXEC)) < 0) {
    fail("open_tree");
    goto out;
  }
  struct mount_attr_ attr = {.attr_set = MOUNT_ATTR_IDMAP_ | MOUNT_ATTR_RDONLY_ | MOUNT_ATTR_NOSUID_ | MOUNT_ATTR_NODEV_, .userns_fd = (uint64_t)ns};
  if (syscall(SYS_mount_setattr, tree, "", AT_EMPTY_PATH, &attr, sizeof attr) != 0) {
    fail(errno == EPERM ? "mount_setattr (the scope is already seen through an idmapped mount)" : "mount_setattr (the filesystem may not support idmapped mounts)");
    close(tree);
    tree = -1;
  }
out:
  if (ns >= 0) close(ns);
  kill(pid, SIGKILL); // reaped by the kernel: SIGCHLD is ignored
  return tree;
}

/** The overlay on `merged` with `lower` as its lower dir: 0, or the errno (why set). */
static int overlay_on(const char *lower, const char *upper, const char *work, const char *merged, unsigned long flags) {
  char data[3 * PATH_MAX + 128];
  if (snprintf(data, sizeof data, "lowerdir=%s,upperdir=%s,workdir=%s,metacopy=off,redirect_dir=off", lower, upper, work) >= (int)sizeof data) {
    errno = ENAMETOOLONG;
    return fail("overlay options");
  }
  return mount("airlock-scope", merged, "overlay", flags, data) == 0 ? 0 : fail("the overlay over the idmapped clone");
}

/** The same with the clone attached at `<merged's folder>/.idmap-lower` (0700, root's) for the mount's time. */
static int overlay_on_attached(int tree, const char *upper, const char *work, const char *merged, unsigned long flags) {
  char lower[PATH_MAX];
  const char *slash = strrchr(merged, '/');
  if (!slash || snprintf(lower, sizeof lower, "%.*s/.idmap-lower", (int)(slash - merged), merged) >= (int)sizeof lower) {
    errno = ENAMETOOLONG;
    return fail("the clone's mount point");
  }
  if (mkdir(lower, 0700) != 0) return fail("the clone's mount point");
  int err = syscall(SYS_move_mount, tree, "", AT_FDCWD, lower, MOVE_MOUNT_F_EMPTY_PATH_) == 0 ? overlay_on(lower, upper, work, merged, flags) : fail("move_mount");
  umount2(lower, MNT_DETACH); // the overlay keeps its own copy of the layer
  rmdir(lower);
  return err;
}

static int idmapped_overlay(char **f, unsigned long from, unsigned long to) {
  const char *source = f[0], *upper = f[1], *work = f[2], *merged = f[3], *ro = f[4];
  if (from == 0 || from >= to) {
    errno = EINVAL;
    return fail("the ids (the sandbox uid must be below the run's)");
  }
  for (int i = 1; i < 4; i++)
    if (strpbrk(f[i], ",:\\")) {
      errno = EINVAL;
      return fail("a path with a character overlayfs options cannot carry (, : \\)");
    }
  int tree = idmapped_tree(source, from, to);
  if (tree < 0) return why_errno;
  char lower[PATH_MAX];
  snprintf(lower, sizeof lower, "/proc/self/fd/%d", tree);
  unsigned long flags = strcmp(ro, "1") ? 0 : MS_RDONLY;
  int err = attach_only ? EINVAL : overlay_on(lower, upper, work, merged, flags);
  // Kernels before 6.15 take no detached mount as an overlay layer (EINVAL): the clone is attached
  // for the mount's time in a folder only root may enter, beside `merged`, then detached.
  if (err == EINVAL) err = overlay_on_attached(tree, upper, work, merged, flags);
  close(tree);
  return err;
}

static void answer(const char *id, int err) {
  printf("%s %d ", id, err);
  if (err)
    for (const char *p = why; *p; p++) printf("%02x", (unsigned char)*p);
  printf("\n");
  fflush(stdout);
}

int main(void) {
  signal(SIGCHLD, SIG_IGN);
  attach_only = getenv("AIRLOCK_IDMAP_ATTACH") && !strcmp(getenv("AIRLOCK_IDMAP_ATTACH"), "1");
  char *line = NULL;
  size_t cap = 0;
  ssize_t len;
  while ((len = getline(&line, &cap, stdin)) > 0) {
    if (line[len - 1] == '\n') line[len - 1] = 0;
    char *f[9] = {0};
    int nf = 0;
    for (char *save = NULL, *t = strtok_r(line, " ", &save); t && nf < 9; t = strtok_r(NULL, " ", &save)) f[nf++] = t;
    if (nf < 2) continue;
    int bad = 0;
    for (int i = 2; i < nf; i++) bad |= unhex(f[i]);
    unsigned long from, to;
    int err;
    why[0] = 0;
    if (!bad && !strcmp(f[1], "O") && nf == 9 && !parse_id(f[7], &from) && !parse_id(f[8], &to)) {
      err = idmapped_overlay(f + 2, from, to);
    } else {
      errno = EINVAL;
      err = fail("bad request");
    }
    answer(f[0], err);
  }
  return 0;
}
