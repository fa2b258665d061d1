// Paths in the sandbox's own view, with links resolved as the kernel resolves them there. Included by
// tracer.c (one build unit).
//
// Why: a path is judged by where it leads, not by how it is spelled. Through a link the program made
// (`/tmp/e -> /root`), `/tmp/e/.ssh/id_rsa` is an attempt on /root; through `/proc/self/root`, every
// host-secret place can be spelled under /proc. Lexically both look harmless.
//
// How, at the call's seccomp stop, from the sandbox's root (`/proc/<pid>/root`, opened once a run):
// - one openat2(RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS) tells whether the path meets a link at all
//   (most do not: then the lexical path is the kernel's);
// - if it does, a walk one component at a time: each opened O_PATH | O_NOFOLLOW from the folder
//   before it, so nothing is followed but what the walk reads and splices itself, and `..` never goes
//   above the sandbox's root. A link's text is read from its own descriptor.
// /proc/self and /proc/thread-self name the reader: they are read as the program's own pid in its pid
// namespace. Links of /proc to what is no path (`pipe:[7]`, `anon_inode:[eventfd]`) end the walk:
// the path as written is kept, and the call acts on that descriptor, not on a path.
// The program can change a link between this stop and the kernel's own walk; the report is the
// host's best reading, not the containment (the read-only root, the namespaces and the diff are).
#include <sys/statfs.h>
#include <sys/syscall.h>
#include <linux/openat2.h>

#ifndef PROC_SUPER_MAGIC
#define PROC_SUPER_MAGIC 0x9fa0
#endif
#define LINK_HOPS 40 // the kernel's MAXSYMLINKS
// Components a walk may open. One tracer serves every run: a program must not make it spend
// long on one call (deep folders named again by each of 40 links). Past it: a finding, not a guess.
#define WALK_BUDGET 1024

enum walk { WALK_SAME, WALK_RESOLVED, WALK_FAILED };

// 1: `path` (absolute) meets a link on its way in the sandbox whose root is `root` (or openat2 is
// missing, so the walk must look); 0: it does not, as far as the kernel's own lookup got.
static int meets_link(int root, const char *path, int follow_last) {
  struct open_how how = {.flags = O_PATH | O_CLOEXEC | (follow_last ? 0 : O_NOFOLLOW), .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS};
  int fd = (int)syscall(SYS_openat2, root, path, &how, sizeof how);
  if (fd >= 0) {
    close(fd);
    return 0;
  }
  return errno == ELOOP || errno == ENOSYS || errno == EINVAL || errno == E2BIG;
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

// The text of the link `fd` (named `name`, in the folder `at`): 1 a path to go on with; 0 a /proc
// link to what is no path; -1 unreadable.
static int link_text(pid_t pid, int fd, const char *at, const char *name, char *dst, size_t cap) {
  ssize_t n = readlinkat(fd, "", dst, cap - 1);
  if (n < 0 && errno == ENOENT && strcmp(at, "/proc") == 0 && (strcmp(name, "self") == 0 || strcmp(name, "thread-self") == 0))
    return proc_self_text(pid, name[0] == 't', dst, cap) ? 1 : -1;
  if (n <= 0 || (size_t)n >= cap - 1) return -1;
  dst[n] = 0;
  struct statfs fs;
  if (dst[0] != '/' && strchr(dst, ':') && fstatfs(fd, &fs) == 0 && fs.f_type == PROC_SUPER_MAGIC) return 0;
  return 1;
}

// Appends `/name` to the resolved path (`len` bytes so far); 0 when it does not fit.
static int put_name(char *dst, size_t cap, size_t *len, const char *name, size_t n) {
  if (*len + 1 + n + 1 > cap) return 0;
  dst[(*len)++] = '/';
  memcpy(dst + *len, name, n);
  *len += n;
  dst[*len] = 0;
  return 1;
}

// Walks `path` (absolute) one component at a time from `root`. WALK_RESOLVED: dst holds where it
// leads (normalized; what does not exist is appended as written, `..` popping lexically);
// WALK_SAME: a /proc link to what is no path, or more links than the kernel follows (dst is
// untouched); WALK_FAILED: too long, over its budget, a link that could not be read or a folder that
// could not be reopened.
static enum walk walk_links(pid_t pid, int root, const char *path, int follow_last, char *dst, size_t cap) {
  char todo[2 * PATH_CAP + 2], target[PATH_CAP];
  if (snprintf(todo, sizeof todo, "%s", path) >= (int)sizeof todo) return WALK_FAILED;
  size_t len = 0, hops = 0, opened = 0;
  int cur = root, missing = 0; // missing: a component did not open; the rest is lexical
  enum walk r = WALK_RESOLVED;
  dst[0] = 0;
  for (char *p = todo;;) {
    while (*p == '/') p++;
    if (!*p) break;
    char *name = p;
    while (*p && *p != '/') p++;
    size_t n = (size_t)(p - name);
    int last = *p == 0; // `name/` (a trailing slash) follows a link like any folder on the way
    if (n == 1 && name[0] == '.') continue;
    if (n == 2 && name[0] == '.' && name[1] == '.') {
      while (len > 0 && dst[--len] != '/') {}
      dst[len] = 0;
      if (missing) continue;
      if (cur != root) close(cur);
      cur = root;
      if (len == 0) continue;
      // Back up by reopening the folder above from the root: it met no link on the way down.
      struct open_how how = {.flags = O_PATH | O_CLOEXEC | O_DIRECTORY, .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_SYMLINKS};
      int up = ++opened > WALK_BUDGET ? -1 : (int)syscall(SYS_openat2, root, dst, &how, sizeof how);
      if (up < 0) {
        r = WALK_FAILED; // over budget, or it changed under the walk
        break;
      }
      cur = up;
      continue;
    }
    int opens = !missing && !(last && !follow_last);
    if (opens && ++opened > WALK_BUDGET) {
      r = WALK_FAILED;
      break;
    }
    char saved = *p;
    *p = 0;
    int fd = opens ? openat(cur, name, O_PATH | O_NOFOLLOW | O_CLOEXEC) : -1;
    struct stat st;
    if (fd >= 0 && fstat(fd, &st) == 0 && S_ISLNK(st.st_mode)) {
      int t = link_text(pid, fd, dst[0] ? dst : "/", name, target, sizeof target);
      close(fd);
      *p = saved;
      // More links than the kernel follows: it fails the call (ELOOP) and nothing is reached.
      if (t <= 0 || ++hops > LINK_HOPS) {
        r = t < 0 ? WALK_FAILED : WALK_SAME;
        break;
      }
      // Go on with the link's text and what was left after it; an absolute one starts at the root.
      char rest[2 * PATH_CAP + 2];
      if (snprintf(rest, sizeof rest, "%s/%s", target, p) >= (int)sizeof rest) {
        r = WALK_FAILED;
        break;
      }
      memcpy(todo, rest, strlen(rest) + 1);
      p = todo;
      if (target[0] == '/') {
        len = 0;
        dst[0] = 0;
        if (cur != root) close(cur);
        cur = root;
      }
      continue;
    }
    *p = saved;
    if (!put_name(dst, cap, &len, name, n)) {
      if (fd >= 0) close(fd);
      r = WALK_FAILED;
      break;
    }
    if (fd < 0) {
      missing = 1;
      continue;
    }
    if (cur != root) close(cur);
    cur = fd;
  }
  if (cur != root) close(cur);
  if (r == WALK_RESOLVED && len == 0) snprintf(dst, cap, "/");
  return r;
}

// Where `path` (absolute, as the program wrote it) leads inside the sandbox of task `pid`, whose root
// is `root`. WALK_SAME: no link on the way, or none that leads to a path (dst untouched: judge the
// path as written); WALK_RESOLVED: dst holds it; WALK_FAILED: the host could not tell (a finding).
static enum walk sandbox_path(pid_t pid, int root, const char *path, int follow_last, char *dst, size_t cap) {
  if (root < 0) return WALK_FAILED;
  return meets_link(root, path, follow_last) ? walk_links(pid, root, path, follow_last, dst, cap) : WALK_SAME;
}
