// airlock-scopefs: every host-side read and write inside a scope, with the scope owner's authority.
//
// Why a separate process in C: Node has no openat(), so every fs call of Node goes by path and the
// kernel resolves every component again; a scope's owner can swap any of them for a symlink between
// two calls. Here every access starts from one directory descriptor (the scope root, opened once
// without following links at any component) and walks down one component at a time, refusing links,
// mount crossings and directories that changed identity. And the process first drops to the uid/gid
// (and groups) of the scope root's owner, with no_new_privs: even a race we did not foresee cannot
// write where that owner could not (docs/promotion.md, "Threat model").
//
// Start: airlock-scopefs <hex absolute path> <dir|file>, or one session per connection of
// `airlock-scopefs --serve <hex socket path>` (see server() below).
//   dir:  the scope is the directory at the path: it is the root of every relative path below.
//   file: the scope is one regular file: the root is its parent directory; requests name the file.
// First line out: `ok hello <walk> <authority uid> <authority gid> <root fd> <pid> <root stat> <groups>`
// (groups: the gids the agent may give a file, comma-separated) or `err <errno> <hex>`.
// /proc/<pid>/fd/<root fd> reaches the root through our descriptor (a lowerdir).
//   <walk> is openat2 (RESOLVE_NO_SYMLINKS|RESOLVE_NO_MAGICLINKS|RESOLVE_NO_XDEV per component) or
//   nofollow (openat with O_NOFOLLOW|O_DIRECTORY and an fstat device check, kernels before 5.6).
//
// Requests on stdin, one line each, strings hex-encoded (no byte can break the framing), `-` = none;
// <rel> is a relative path below the root (`-` for the root itself), never `.`, `..` or empty parts:
//   S <rel>                       lstat                 -> ok <stat> | ok -  (absent)
//   R <rel> <max>                 read a regular file   -> ok <stat>, then chunks (below)
//   L <rel>                       list a directory      -> ok <hexname>...
//   K <rel>                       read a symbolic link  -> ok <hex target>  (never followed)
//   W <rel> <stage> <mode> <gid|-> <asec> <ansec> <msec> <mnsec> <expect>, then chunks
//                                 write a regular file: staged as <stage> beside it, fsync'd, then
//                                 put in place (<expect> `-`: the name must be free; `dev:ino`: it
//                                 must hold exactly that file, swapped atomically) -> ok <stat>
//   M <rel> <mode> <gid|->        mkdir                 -> ok <stat>
//   C <rel> <mode> <gid|-> <expect>  chmod, then chgrp  -> ok <stat>
//   U <rel> <expect>              unlink a non-directory (identity checked; never followed) -> ok
//   D <rel> <expect>              rmdir                 -> ok
//   F <rel>                       fsync a directory     -> ok
//   P <rel> <dev:ino>             pin: the directory at rel must be this inode for the whole session
// Chunks: `<decimal length>\n<bytes>` repeated, ended by `0\n`.
// <stat>: <type f|d|l|p|s|c|b> <mode octal> <uid> <gid> <size> <nlink> <dev> <ino> <msec> <mnsec> <asec> <ansec> <csec> <cnsec>
// <expect>: `dev:ino`, or a version `dev:ino:csec:cnsec:size` (an in-place edit since is a mismatch too)
// Errors: `err <errno> <hex message>`; ESTALE means a directory is not the one pinned (or first seen).
// A failed system call's message ends with its strerror text ("write x: Operation not permitted").
// Modes with set-uid, set-gid or sticky bits are refused (EPERM): no privilege comes out of a sandbox.
#define _GNU_SOURCE
#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <grp.h>
#include <limits.h>
#include <linux/capability.h>
#include <linux/openat2.h>
#include <pwd.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#define MAX_DEPTH 256
#define MAX_PINS (1 << 18)
#define CHUNK (1 << 16)

static int root_fd = -1;
static dev_t root_dev;
static int use_openat2 = 1;

// ---- output --------------------------------------------------------------------------------------

static void hexout(const char *s, size_t n) {
  static const char d[] = "0123456789abcdef";
  for (size_t i = 0; i < n; i++) putchar(d[(unsigned char)s[i] >> 4]), putchar(d[(unsigned char)s[i] & 15]);
}

static int vfail(int err, int why, const char *fmt, va_list ap) {
  char msg[512];
  int n = vsnprintf(msg, sizeof msg, fmt, ap);
  if (why && n >= 0 && (size_t)n < sizeof msg) snprintf(msg + n, sizeof msg - (size_t)n, ": %s", strerror(err ? err : EIO));
  printf("err %d ", err ? err : EIO);
  hexout(msg, strlen(msg));
  putchar('\n');
  return -1;
}

/** A refusal whose message says it all. */
static int fail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(err, 0, fmt, ap);
  va_end(ap);
  return -1;
}

/** A system call that failed: the message ends with the kernel's reason (strerror), e.g. "write x: Operation not permitted". */
static int sysfail(int err, const char *fmt, ...) {
  va_list ap;
  va_start(ap, fmt);
  vfail(err, 1, fmt, ap);
  va_end(ap);
  return -1;
}

static char type_of(mode_t m) {
  return S_ISREG(m) ? 'f' : S_ISDIR(m) ? 'd' : S_ISLNK(m) ? 'l' : S_ISFIFO(m) ? 'p' : S_ISSOCK(m) ? 's' : S_ISCHR(m) ? 'c' : 'b';
}

static void put_stat(const struct stat *st) {
  printf(" %c %o %u %u %lld %llu %llu %llu %lld %ld %lld %ld %lld %ld", type_of(st->st_mode), (unsigned)(st->st_mode & 07777), (unsigned)st->st_uid,
         (unsigned)st->st_gid, (long long)st->st_size, (unsigned long long)st->st_nlink, (unsigned long long)st->st_dev,
         (unsigned long long)st->st_ino, (long long)st->st_mtim.tv_sec, st->st_mtim.tv_nsec, (long long)st->st_atim.tv_sec, st->st_atim.tv_nsec,
         (long long)st->st_ctim.tv_sec, st->st_ctim.tv_nsec);
}

// ---- input ---------------------------------------------------------------------------------------

static int unhex(char *h) {
  size_t n = strlen(h);
  if (n % 2) return -1;
  for (size_t i = 0; i < n; i += 2) {
    int v = 0;
    for (int k = 0; k < 2; k++) {
      char c = h[i + k];
      v = v * 16 + (c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : -1000);
    }
    if (v < 0 || v == 0) return -1;  // no NUL inside a name
    h[i / 2] = (char)v;
  }
  h[n / 2] = 0;
  return 0;
}

/** Reads chunks into fd (or discards them when fd < 0); -1 on a broken frame. */
static int read_chunks(int fd, int *werr) {
  static char buf[CHUNK];
  for (;;) {
    char line[32];
    if (!fgets(line, sizeof line, stdin)) return -1;
    char *end;
    unsigned long long len = strtoull(line, &end, 10);
    if (*end != '\n') return -1;
    if (len == 0) return 0;
    while (len > 0) {
      size_t want = len > CHUNK ? CHUNK : (size_t)len;
      if (fread(buf, 1, want, stdin) != want) return -1;
      len -= want;
      for (size_t off = 0; fd >= 0 && !*werr && off < want;) {
        ssize_t w = write(fd, buf + off, want - off);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) *werr = w < 0 ? errno : EIO;
        else off += (size_t)w;
      }
    }
  }
}

// ---- the walk ------------------------------------------------------------------------------------

// Pins: directory path (relative) -> the inode first seen there, in an open-addressing table.
struct pin {
  char *rel;
  dev_t dev;
  ino_t ino;
  int dead;  // removed (rmdir, or pinned again): its slot keeps probing chains intact
};
static struct pin pins[MAX_PINS];
static int npins;

static struct pin *slot_of(const char *rel, int create) {
  uint64_t h = 1469598103934665603ull;
  for (const char *c = rel; *c; c++) h = (h ^ (unsigned char)*c) * 1099511628211ull;
  for (size_t i = 0, k = (size_t)(h % MAX_PINS); i < MAX_PINS; i++, k = (k + 1) % MAX_PINS) {
    if (!pins[k].rel) {
      if (!create || npins >= MAX_PINS * 3 / 4) return NULL;  // full: the walk still refuses links
      npins++;
      pins[k].rel = strdup(rel);
      pins[k].dead = 1;
      return pins[k].rel ? &pins[k] : NULL;
    }
    if (strcmp(pins[k].rel, rel) == 0) return &pins[k];
  }
  return NULL;
}

/** Records a pin; -1 when the table is full (the caller refuses: an unpinned directory is unchecked). */
static int set_pin(const char *rel, dev_t dev, ino_t ino) {
  struct pin *p = slot_of(rel, 1);
  if (!p) return -1;
  p->dev = dev, p->ino = ino, p->dead = 0;
  return 0;
}

static void unpin(const char *rel) {
  struct pin *p = slot_of(rel, 0);
  if (p) p->dead = 1;
}

/**
 * The directory at rel must be (dev, ino): pinned when first seen, checked every later time.
 * -1 (errno ESTALE): another inode is there now; -1 (errno ENOSPC): too many directories to track.
 */
static int check_pin(const char *rel, const struct stat *st) {
  struct pin *p = slot_of(rel, 0);
  if (p && !p->dead) return p->dev == st->st_dev && p->ino == st->st_ino ? 0 : (errno = ESTALE, -1);
  return set_pin(rel, st->st_dev, st->st_ino) < 0 ? (errno = ENOSPC, -1) : 0;
}

/** The refusal for a failed pin check, naming the directory. */
static int pin_refusal(const char *rel) {
  return errno == ENOSPC ? fail(ENOSPC, "%s: more directories in one operation than the agent can keep track of: refused", rel)
                         : fail(ESTALE, "%s: this directory was replaced since it was first seen", rel);
}

/** Opens one component below dirfd: a real directory on the scope's device, never through a link. */
static int open_component(int dirfd, const char *name) {
  if (use_openat2) {
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC,
                           .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS | RESOLVE_NO_XDEV};
    int fd = (int)syscall(SYS_openat2, dirfd, name, &how, sizeof how);
    if (fd >= 0 || errno != ENOSYS) return fd;
    use_openat2 = 0;
  }
  int fd = openat(dirfd, name, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) return -1;
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISDIR(st.st_mode) || st.st_dev != root_dev) {
    close(fd);
    errno = EXDEV;
    return -1;
  }
  return fd;
}

static int valid_rel(const char *rel) {
  if (!*rel || *rel == '/' || strlen(rel) >= PATH_MAX) return 0;
  for (const char *p = rel; *p;) {
    const char *e = strchr(p, '/');
    size_t n = e ? (size_t)(e - p) : strlen(p);
    if (n == 0 || n > NAME_MAX || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
    p += n + (e ? 1 : 0);
    if (e && !*p) return 0;
  }
  return 1;
}

/**
 * Walks rel's parent directories from the root; returns an O_PATH fd of the parent and sets *name to
 * rel's last component. Every directory on the way is checked against its pin.
 */
static int walk_parent(const char *rel, const char **name) {
  const char *slash = strrchr(rel, '/');
  *name = slash ? slash + 1 : rel;
  int fd = dup(root_fd);
  if (fd < 0) return sysfail(errno, "dup");
  size_t end = slash ? (size_t)(slash - rel) : 0;
  for (size_t start = 0; start < end;) {
    const char *e = memchr(rel + start, '/', end - start);
    size_t stop = e ? (size_t)(e - rel) : end;
    char comp[NAME_MAX + 1], prefix[PATH_MAX];
    memcpy(comp, rel + start, stop - start), comp[stop - start] = 0;
    memcpy(prefix, rel, stop), prefix[stop] = 0;
    int next = open_component(fd, comp);
    int err = errno;
    close(fd);
    if (next < 0)
      return err == ELOOP || err == ENOTDIR ? fail(err, "%s: a symbolic link or not a directory", prefix)
             : err == EXDEV ? fail(err, "%s: on another filesystem (a mount point)", prefix)
                            : sysfail(err, "%s: cannot open this directory", prefix);
    fd = next;
    struct stat st;
    if (fstat(fd, &st) < 0 || check_pin(prefix, &st) < 0) {
      close(fd);
      return pin_refusal(prefix);
    }
    start = stop + 1;
  }
  return fd;
}

static int parse_ident(const char *s, dev_t *dev, ino_t *ino) {
  unsigned long long d, i;
  char tail;
  if (sscanf(s, "%llu:%llu%c", &d, &i, &tail) != 2 && !(sscanf(s, "%llu:%llu%c", &d, &i, &tail) == 3 && tail == ':')) return -1;
  *dev = (dev_t)d, *ino = (ino_t)i;
  return 0;
}

/**
 * `dev:ino`, or `dev:ino:ctime_sec:ctime_nsec:size` (a version): with a version, an in-place edit
 * since it was read (same inode, new ctime or size) is not the entry that was checked either.
 */
static int same_ident(const struct stat *st, const char *expect) {
  unsigned long long d, i, size;
  long long cs;
  long cn;
  int n = sscanf(expect, "%llu:%llu:%lld:%ld:%llu", &d, &i, &cs, &cn, &size);
  if (n != 2 && n != 5) return 0;
  if (st->st_dev != (dev_t)d || st->st_ino != (ino_t)i) return 0;
  return n == 2 || (st->st_ctim.tv_sec == cs && st->st_ctim.tv_nsec == cn && (unsigned long long)st->st_size == size);
}

/** The root itself (`-`) or an entry below it, as (dirfd, name) for the *at calls. */
struct target {
  int dirfd;
  const char *name;  // "" for the root: used with AT_EMPTY_PATH
  char rel[PATH_MAX];
};

static int resolve(char *hexrel, struct target *t) {
  t->rel[0] = 0;
  if (strcmp(hexrel, "-") == 0) {
    t->dirfd = dup(root_fd), t->name = "", t->rel[0] = 0;
    return t->dirfd < 0 ? sysfail(errno, "dup") : 0;
  }
  if (unhex(hexrel) < 0 || !valid_rel(hexrel)) return fail(EINVAL, "not a relative path below the scope");
  strcpy(t->rel, hexrel);
  t->dirfd = walk_parent(t->rel, &t->name);
  return t->dirfd < 0 ? -1 : 0;
}

static int stat_target(const struct target *t, struct stat *st) {
  return fstatat(t->dirfd, t->name, st, AT_SYMLINK_NOFOLLOW | (*t->name ? 0 : AT_EMPTY_PATH));
}

/** Opens the target itself for reading without following it (a directory: O_DIRECTORY). */
static int open_target(const struct target *t, int flags) {
  if (!*t->name) return openat(t->dirfd, ".", flags | O_NOFOLLOW | O_CLOEXEC);
  return openat(t->dirfd, t->name, flags | O_NOFOLLOW | O_CLOEXEC | O_NOCTTY);
}

// ---- requests ------------------------------------------------------------------------------------

static int no_privilege_bits(unsigned mode) {
  return (mode & 07000) ? fail(EPERM, "mode %o refused: set-uid, set-gid and sticky bits are never written", mode) : 0;
}

static int set_mode_fd(int fd, unsigned mode, const char *gid) {
  // fchmod cannot act on an O_PATH fd; its /proc/self/fd link reaches the inode we hold, not a name.
  char proc[64];
  snprintf(proc, sizeof proc, "/proc/self/fd/%d", fd);
  if (chmod(proc, mode) < 0) return sysfail(errno, "chmod");
  if (strcmp(gid, "-") != 0) {
    char *end;
    unsigned long g = strtoul(gid, &end, 10);
    if (*end || chown(proc, (uid_t)-1, (gid_t)g) < 0) return sysfail(*end ? EINVAL : errno, "chgrp to %s", gid);
  }
  return 0;
}

static int do_stat(struct target *t) {
  struct stat st;
  if (stat_target(t, &st) < 0) {
    if (errno == ENOENT) return printf("ok -\n"), 0;
    return sysfail(errno, "stat %s", t->rel);
  }
  if (S_ISDIR(st.st_mode) && check_pin(t->rel, &st) < 0) return pin_refusal(t->rel);
  printf("ok");
  put_stat(&st);
  putchar('\n');
  return 0;
}

static int do_read(struct target *t, const char *maxs) {
  unsigned long long max = strtoull(maxs, NULL, 10);
  int fd = open_target(t, O_RDONLY | O_NONBLOCK);
  if (fd < 0) return sysfail(errno, "open %s for reading", t->rel);
  struct stat st;
  if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return fail(EINVAL, "%s is not a regular file", t->rel);
  }
  if ((unsigned long long)st.st_size > max) {
    close(fd);
    return fail(EFBIG, "%s has %lld bytes, more than the %llu allowed", t->rel, (long long)st.st_size, max);
  }
  printf("ok");
  put_stat(&st);
  putchar('\n');
  // Never more than the size fstat gave (a file growing under us does not grow the answer).
  static char buf[CHUNK];
  unsigned long long left = (unsigned long long)st.st_size;
  while (left > 0) {
    ssize_t n = read(fd, buf, left > CHUNK ? CHUNK : (size_t)left);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    printf("%zd\n", n);
    fwrite(buf, 1, (size_t)n, stdout);
    left -= (unsigned long long)n;
  }
  close(fd);
  printf("0\n");
  return 0;
}

static int do_list(struct target *t) {
  int fd = open_target(t, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return sysfail(errno, "open directory %s", t->rel);
  struct stat st;
  if (fstat(fd, &st) < 0 || st.st_dev != root_dev) {
    close(fd);
    return fail(EXDEV, "%s: on another filesystem (a mount point)", t->rel);
  }
  if (check_pin(t->rel, &st) < 0) {
    close(fd);
    return pin_refusal(t->rel);
  }
  DIR *d = fdopendir(fd);
  if (!d) {
    close(fd);
    return sysfail(errno, "read directory %s", t->rel);
  }
  printf("ok");
  for (struct dirent *e; (e = readdir(d));) {
    if (strcmp(e->d_name, ".") == 0 || strcmp(e->d_name, "..") == 0) continue;
    putchar(' ');
    hexout(e->d_name, strlen(e->d_name));
  }
  putchar('\n');
  closedir(d);
  return 0;
}

static int do_readlink(struct target *t) {
  char buf[PATH_MAX];
  ssize_t n = readlinkat(t->dirfd, t->name, buf, sizeof buf);
  if (n < 0) return sysfail(errno, "readlink %s", t->rel);
  printf("ok ");
  hexout(buf, (size_t)n);
  putchar('\n');
  return 0;
}

static int do_write(struct target *t, char **f) {
  char *stage = f[0];
  unsigned mode = (unsigned)strtoul(f[1], NULL, 8);
  int werr = 0;
  if (!*t->name || unhex(stage) < 0 || strchr(stage, '/') || strncmp(stage, ".airlock-stage-", 15) != 0) {
    read_chunks(-1, &werr);
    return fail(EINVAL, "bad write request");
  }
  if (no_privilege_bits(mode) < 0) return read_chunks(-1, &werr), -1;
  // A leftover stage of an interrupted attempt has our own name: remove it (never follow it). What
  // unlink cannot remove (a directory the owner made there: stage names are predictable once one is
  // seen) is moved aside in the same directory, so that it cannot block this write, the undo and every
  // recovery for good (the owner can still race it: that is a failure, not a wedge).
  if (unlinkat(t->dirfd, stage, 0) < 0 && errno != ENOENT) {
    static unsigned long asides;
    char aside[NAME_MAX + 1];
    for (int k = 0; k < 64; k++) {
      snprintf(aside, sizeof aside, ".airlock-aside-%d-%ld-%lu", (int)getpid(), (long)time(NULL), asides++);
      if (renameat2(t->dirfd, stage, t->dirfd, aside, RENAME_NOREPLACE) == 0 || errno != EEXIST) break;
    }
  }
  int fd = openat(t->dirfd, stage, O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    int e = errno;
    read_chunks(-1, &werr);
    return sysfail(e, "create %s beside %s", stage, t->rel);
  }
  if (read_chunks(fd, &werr) < 0) exit(3);  // the framing is broken: nothing more can be trusted
  struct timespec times[2] = {{atoll(f[3]), atol(f[4])}, {atoll(f[5]), atol(f[6])}};
  if (times[0].tv_sec < 0) times[0].tv_nsec = UTIME_OMIT;
  int bad = werr ? (errno = werr, 1) : 0;
  if (!bad) bad = fchmod(fd, mode) < 0;  // before any chown: never chmod after chown
  if (!bad && strcmp(f[2], "-") != 0) bad = fchown(fd, (uid_t)-1, (gid_t)strtoul(f[2], NULL, 10)) < 0;
  if (!bad && times[1].tv_sec >= 0) bad = futimens(fd, times) < 0;
  if (!bad) bad = fsync(fd) < 0;
  int e = errno;
  close(fd);
  if (bad) {
    unlinkat(t->dirfd, stage, 0);
    return sysfail(e, "write %s", t->rel);
  }
  const char *expect = f[7];
  if (strcmp(expect, "-") == 0) {
    if (renameat2(t->dirfd, stage, t->dirfd, t->name, RENAME_NOREPLACE) < 0) {
      e = errno;
      if (e == EINVAL && linkat(t->dirfd, stage, t->dirfd, t->name, 0) == 0) e = 0;  // no NOREPLACE here
      unlinkat(t->dirfd, stage, 0);
      if (e) return e == EEXIST ? fail(e, "%s exists: nothing was replaced", t->rel) : sysfail(e, "put %s in place", t->rel);
    }
  } else {
    // The file as it was read (its version: no edit in place since, which a rename's own ctime update
    // would hide afterwards), then an atomic swap and a check of the inode that came out: if it is
    // not the file we expected, swap back.
    struct stat now;
    if (fstatat(t->dirfd, t->name, &now, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(now.st_mode) || !same_ident(&now, expect)) {
      unlinkat(t->dirfd, stage, 0);
      return fail(ESTALE, "%s changed since it was checked: nothing was written", t->rel);
    }
    if (renameat2(t->dirfd, stage, t->dirfd, t->name, RENAME_EXCHANGE) < 0) {
      e = errno;
      unlinkat(t->dirfd, stage, 0);
      return sysfail(e, "replace %s", t->rel);
    }
    struct stat old;
    char inode[64];
    snprintf(inode, sizeof inode, "%llu:%llu", (unsigned long long)now.st_dev, (unsigned long long)now.st_ino);
    if (fstatat(t->dirfd, stage, &old, AT_SYMLINK_NOFOLLOW) < 0 || !S_ISREG(old.st_mode) || !same_ident(&old, inode)) {
      renameat2(t->dirfd, stage, t->dirfd, t->name, RENAME_EXCHANGE);
      unlinkat(t->dirfd, stage, 0);
      return fail(ESTALE, "%s was replaced by something else since it was checked: nothing was written", t->rel);
    }
    unlinkat(t->dirfd, stage, 0);
  }
  return do_stat(t);
}

static int do_mkdir(struct target *t, char **f) {
  unsigned mode = (unsigned)strtoul(f[0], NULL, 8);
  if (!*t->name) return fail(EINVAL, "the root is never created");
  if (no_privilege_bits(mode) < 0) return -1;
  if (mkdirat(t->dirfd, t->name, 0700) < 0) return sysfail(errno, "mkdir %s", t->rel);
  int fd = open_component(t->dirfd, t->name);
  if (fd < 0) return sysfail(errno, "open the new directory %s", t->rel);
  struct stat st;
  unpin(t->rel);
  int bad = fstat(fd, &st) < 0 ? sysfail(errno, "fstat %s", t->rel) : check_pin(t->rel, &st) < 0 ? pin_refusal(t->rel) : set_mode_fd(fd, mode, f[1]);
  close(fd);
  return bad < 0 ? -1 : do_stat(t);
}

static int do_chmod(struct target *t, char **f) {
  unsigned mode = (unsigned)strtoul(f[0], NULL, 8);
  if (no_privilege_bits(mode) < 0) return -1;
  int fd = *t->name ? openat(t->dirfd, t->name, O_PATH | O_NOFOLLOW | O_CLOEXEC) : dup(t->dirfd);
  if (fd < 0) return sysfail(errno, "open %s", t->rel);
  struct stat st;
  int bad = fstat(fd, &st) < 0 ? sysfail(errno, "fstat %s", t->rel)
            : !(S_ISREG(st.st_mode) || S_ISDIR(st.st_mode)) || !same_ident(&st, f[2]) ? fail(ESTALE, "%s is not the file or directory that was checked: its mode was not changed", t->rel)
            : S_ISREG(st.st_mode) && st.st_nlink > 1 ? fail(EMLINK, "%s has other hard links: its mode is not changed through it", t->rel)
            : set_mode_fd(fd, mode, f[1]);
  close(fd);
  return bad < 0 ? -1 : do_stat(t);
}

static int do_remove(struct target *t, char **f, int dir) {
  struct stat st;
  if (!*t->name) return fail(EINVAL, "the root is never removed");
  if (stat_target(t, &st) < 0) return sysfail(errno, "stat %s", t->rel);
  if (!same_ident(&st, f[0]) || (dir ? !S_ISDIR(st.st_mode) : S_ISDIR(st.st_mode))) return fail(ESTALE, "%s is not the entry that was checked: nothing was removed", t->rel);
  if (unlinkat(t->dirfd, t->name, dir ? AT_REMOVEDIR : 0) < 0) return sysfail(errno, "remove %s", t->rel);
  if (dir) unpin(t->rel);
  return printf("ok\n"), 0;
}

static int do_fsync(struct target *t) {
  int fd = open_target(t, O_RDONLY | O_DIRECTORY);
  if (fd < 0) return sysfail(errno, "open %s", t->rel);
  int bad = fsync(fd) < 0;
  close(fd);
  return bad ? sysfail(errno, "fsync %s", t->rel) : (printf("ok\n"), 0);
}

static int do_pin(struct target *t, char **f) {
  dev_t d;
  ino_t i;
  if (parse_ident(f[0], &d, &i) < 0) return fail(EINVAL, "bad identity");
  set_pin(t->rel, d, i);
  return printf("ok\n"), 0;
}

static void serve(void) {
  char *line = NULL;
  size_t cap = 0;
  while (getline(&line, &cap, stdin) > 0) {
    char *f[12];
    int n = 0;
    for (char *s = strtok(line, " \n"); s && n < 12; s = strtok(NULL, " \n")) f[n++] = s;
    static const struct { char op; int args; } ops[] = {{'S', 1}, {'R', 2}, {'L', 1}, {'K', 1}, {'W', 9}, {'M', 3}, {'C', 4}, {'U', 2}, {'D', 2}, {'F', 1}, {'P', 2}};
    int want = -1;
    for (size_t k = 0; k < sizeof ops / sizeof ops[0]; k++)
      if (n > 0 && f[0][0] == ops[k].op && !f[0][1]) want = ops[k].args;
    struct target t;
    if (want < 0 || n != want + 1) {
      fail(EINVAL, "bad request");
      fflush(stdout);
      if (n > 0 && f[0][0] == 'W') exit(3);  // its content would be read as requests
      continue;
    }
    if (resolve(f[1], &t) < 0) {
      int werr = 0;
      if (f[0][0] == 'W' && read_chunks(-1, &werr) < 0) exit(3);
      fflush(stdout);
      continue;
    }
    switch (f[0][0]) {
      case 'S': do_stat(&t); break;
      case 'R': do_read(&t, f[2]); break;
      case 'L': do_list(&t); break;
      case 'K': do_readlink(&t); break;
      case 'W': do_write(&t, f + 2); break;
      case 'M': do_mkdir(&t, f + 2); break;
      case 'C': do_chmod(&t, f + 2); break;
      case 'U': do_remove(&t, f + 2, 0); break;
      case 'D': do_remove(&t, f + 2, 1); break;
      case 'F': do_fsync(&t); break;
      case 'P': do_pin(&t, f + 2); break;
    }
    close(t.dirfd);
    fflush(stdout);
  }
  free(line);
}

// ---- start: open the root, then drop to its owner ------------------------------------------------

/** Opens an absolute path's directory from "/" one component at a time, never through a link. */
static int open_absolute(char *path) {
  int fd = open("/", O_PATH | O_DIRECTORY | O_CLOEXEC);
  for (char *p = path + 1, *e; fd >= 0 && p && *p; p = e) {
    e = strchr(p, '/');
    if (e) *e++ = 0;
    struct open_how how = {.flags = O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC, .resolve = RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS};
    int next = use_openat2 ? (int)syscall(SYS_openat2, fd, p, &how, sizeof how) : -1;
    if (next < 0 && (!use_openat2 || errno == ENOSYS)) use_openat2 = 0, next = openat(fd, p, O_PATH | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
    int err = errno;
    close(fd);
    fd = next;
    errno = err;
  }
  return fd;
}

/** Keeps only what writing another uid's files in a root-owned scope needs. */
static int drop_root_caps(void) {
  const int keep[] = {CAP_CHOWN, CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH, CAP_FOWNER};
  uint32_t mask = 0;
  for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++) mask |= 1u << keep[i];
  for (int c = 0; c < 64; c++)
    if (c >= 32 || !(mask & (1u << c))) prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
  prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0, 0);
  struct __user_cap_header_struct h = {_LINUX_CAPABILITY_VERSION_3, 0};
  struct __user_cap_data_struct d[2] = {{mask, mask, 0}, {0, 0, 0}};
  return (int)syscall(SYS_capset, &h, d);
}

#define NO_GROUP 65534  // nogroup / the kernel's overflow gid: a group that grants nothing

/**
 * The owner's own groups, never the root directory's group as such: a directory owned by alice with
 * group www-data (chgrp'ed by root) must not give the agent www-data's access, which alice does not
 * have. The root's group is the agent's gid only when the owner belongs to it; otherwise the owner's
 * passwd group. A uid without a passwd entry has no known groups: the root's group is kept only when
 * it is the user-private group (gid == uid), else nogroup.
 */
static gid_t owner_groups(uid_t uid, gid_t dir_gid, gid_t *groups, int *n) {
  struct passwd *pw = getpwuid(uid);
  if (!pw) {
    groups[0] = dir_gid == (gid_t)uid ? dir_gid : NO_GROUP;
    *n = 1;
    return groups[0];
  }
  if (getgrouplist(pw->pw_name, pw->pw_gid, groups, n) < 0) groups[0] = pw->pw_gid, *n = 1;
  for (int i = 0; i < *n; i++)
    if (groups[i] == dir_gid) return dir_gid;
  return pw->pw_gid;
}

static int drop_to_owner(uid_t uid, gid_t dir_gid) {
  if (geteuid() != 0) return 0;  // not root: we act with our own, smaller, authority
  if (uid == 0) return drop_root_caps();
  gid_t groups[256];
  int n = 256;
  gid_t gid = owner_groups(uid, dir_gid, groups, &n);
  for (int c = 0; c < 64; c++) prctl(PR_CAPBSET_DROP, c, 0, 0, 0);
  if (setgroups((size_t)n, groups) < 0 || setresgid(gid, gid, gid) < 0 || setresuid(uid, uid, uid) < 0) return -1;
  return setuid(0) == 0 ? -1 : 0;  // must be impossible now
}

/** One scope session: open the root from `path` (hex), drop to its owner, answer requests on stdin/stdout. */
static int session(char *hexpath, const char *kind) {
  if ((strcmp(kind, "dir") && strcmp(kind, "file")) || unhex(hexpath) < 0 || hexpath[0] != '/') {
    fail(EINVAL, "usage: airlock-scopefs <hex absolute path> <dir|file>");
    return fflush(stdout), 2;
  }
  char *path = hexpath;
  size_t len = strlen(path);
  if (len < 2 || path[len - 1] == '/' || !valid_rel(path + 1)) return fail(EINVAL, "%s is not an absolute, normalised path", path), fflush(stdout), 2;
  int file = strcmp(kind, "file") == 0;
  char *last = strrchr(path, '/');
  if (file) *last = 0;  // the root is the file's parent directory
  root_fd = open_absolute(file && last == path ? (char[]){'/', 0} : path);
  if (root_fd < 0) {
    int e = errno;
    return (e == ELOOP || e == ENOTDIR ? fail(e, "%s: a component is a symbolic link or not a directory", path) : sysfail(e, "%s: cannot open", path)), fflush(stdout), 1;
  }
  struct stat st;
  if (fstat(root_fd, &st) < 0) return sysfail(errno, "fstat"), fflush(stdout), 1;
  root_dev = st.st_dev;
  if (drop_to_owner(st.st_uid, st.st_gid) < 0 || prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) < 0)
    return sysfail(errno, "cannot take the authority of uid %u", (unsigned)st.st_uid), fflush(stdout), 1;
  printf("ok hello %s %u %u %d %d", use_openat2 ? "openat2" : "nofollow", (unsigned)geteuid(), (unsigned)getegid(), root_fd, (int)getpid());
  put_stat(&st);
  // The groups a file of ours may be given (chown(fd, -1, gid) as the owner): our gid and
  // supplementary groups, comma-separated. A root-owned scope keeps CAP_CHOWN: any group.
  gid_t groups[256];
  int ng = getgroups(256, groups);
  printf(" %u", (unsigned)getegid());
  for (int i = 0; i < ng; i++) printf(",%u", (unsigned)groups[i]);
  putchar('\n');
  fflush(stdout);
  serve();
  return 0;
}

/**
 * `--serve <hex socket path>`: one long-lived process that starts a session per connection (a
 * fork of this small process, instead of a fork of the large Node process per scope). Only the
 * process that started it can connect: the socket is in a folder of its own, mode 0700. Each
 * session first says `pid <pid>`, then reads the connection's first line, `<hex path> <dir|file>`,
 * and answers as above.
 * A session's process is reaped only when stdin says `R <pid>` (after its client closed it), so
 * its pid cannot be another process's while the client may still use /proc/<pid>/fd/<root fd>;
 * one that has not exited yet is reaped when it does (looked at every second), never waited for.
 * Stdin's end (the client process is gone) ends the server; sessions end with their connections.
 */
static int server(char *hexsock) {
  if (unhex(hexsock) < 0 || hexsock[0] != '/') return fail(EINVAL, "bad socket path"), fflush(stdout), 2;
  struct sockaddr_un addr = {.sun_family = AF_UNIX};
  if (strlen(hexsock) >= sizeof addr.sun_path) return fail(ENAMETOOLONG, "socket path too long"), fflush(stdout), 2;
  strcpy(addr.sun_path, hexsock);
  int lfd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (lfd < 0 || bind(lfd, (struct sockaddr *)&addr, sizeof addr) < 0 || chmod(hexsock, 0600) < 0 || listen(lfd, 64) < 0) return sysfail(errno, "cannot listen on %s", hexsock), fflush(stdout), 1;
  printf("ok serving\n");
  fflush(stdout);
  char pending[256];
  size_t held = 0;
  // Sessions to reap that had not exited yet: a killed session can stay in the kernel (a FUSE
  // request its server read and never answers) and a blocking waitpid would stop every session.
  pid_t unreaped[256];
  size_t nunreaped = 0;
  for (;;) {
    for (size_t i = 0; i < nunreaped;) {
      if (waitpid(unreaped[i], NULL, WNOHANG) == 0) i++;
      else unreaped[i] = unreaped[--nunreaped];
    }
    struct pollfd fds[2] = {{0, POLLIN, 0}, {lfd, POLLIN, 0}};
    if (poll(fds, 2, nunreaped ? 1000 : -1) < 0) {
      if (errno == EINTR) continue;
      return 1;
    }
    if (fds[0].revents) {
      // read(2), not stdio: a forked session must not inherit buffered bytes of this stream.
      ssize_t n = read(0, pending + held, sizeof pending - 1 - held);
      if (n <= 0) break;  // our client is gone
      held += (size_t)n;
      pending[held] = 0;
      char *line = pending, *nl;
      while ((nl = strchr(line, '\n'))) {
        *nl = 0;
        int pid;
        if (sscanf(line, "R %d", &pid) == 1 && pid > 0 && waitpid(pid, NULL, WNOHANG) == 0) {
          // With 256 stuck at once, one more is left a zombie (its pid stays taken) rather than waited for.
          if (nunreaped < sizeof unreaped / sizeof *unreaped) unreaped[nunreaped++] = pid;
        }
        line = nl + 1;
      }
      held = strlen(line);
      memmove(pending, line, held + 1);
      if (held == sizeof pending - 1) held = 0;  // no line is this long: drop the garbage
    }
    if (fds[1].revents & POLLIN) {
      int c = accept4(lfd, NULL, NULL, SOCK_CLOEXEC);
      if (c < 0) continue;
      pid_t child = fork();
      if (child == 0) {
        close(lfd);
        if (dup2(c, 0) < 0 || dup2(c, 1) < 0) _exit(1);
        close(c);
        clearerr(stdin);
        // Sent first, while we are still root: the client reaps us by it, also when it never sends
        // a path (a session connected ahead of need and dropped); and once the session takes the
        // owner's uid, the owner can SIGSTOP it, and the client finds a stopped agent by this pid (a
        // buffered pid it never got would leave a promotion waiting forever).
        printf("pid %d\n", (int)getpid());
        fflush(stdout);
        char first[2 * PATH_MAX + 16];
        if (!fgets(first, sizeof first, stdin)) _exit(1);
        char *kind = strchr(first, ' ');
        if (!kind) _exit(1);
        *kind++ = 0;
        kind[strcspn(kind, "\n")] = 0;
        _exit(session(first, kind));
      }
      close(c);
    }
  }
  unlink(hexsock);
  return 0;
}

int main(int argc, char **argv) {
  setvbuf(stdout, NULL, _IOFBF, 1 << 16);
  umask(0);
  struct rlimit no_core = {0, 0};
  setrlimit(RLIMIT_CORE, &no_core);
  prctl(PR_SET_DUMPABLE, 0, 0, 0, 0);
  if (argc == 3 && strcmp(argv[1], "--serve") == 0) return server(argv[2]);
  if (argc != 3) return fail(EINVAL, "usage: airlock-scopefs <hex absolute path> <dir|file> | --serve <hex socket path>"), fflush(stdout), 2;
  return session(argv[1], argv[2]);
}
