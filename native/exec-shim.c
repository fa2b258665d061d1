// airlock-exec: the first program of a sandbox started ahead of need (src/sandbox/ns/pool.ts).
//
// bwrap has set up everything (namespaces, mounts, uid, seccomp, cgroup, rlimits, the host tracer
// attached) and exec'd this program as the sandbox's process 1's child. It waits for the one run the
// sandbox will serve: it connects to the host's unix socket at /.airlock/cmd.sock (bound read-only
// into the sandbox; the host accepts one connection), reads the command, and becomes it with execve
// (same pid: the host drops this program's own events and keeps the program's). It never runs a
// second command.
//
// Command: a 4-byte little-endian length, then that many bytes of NUL-terminated strings:
//   cwd, argc (decimal), argv[0..argc), then the environment, one NAME=value per string.
// argv[0] is the absolute path to exec (the host resolved it on the sandbox's PATH).
// Errors: a line on stderr and exit 127 (the host reports the run as failed to start).
#define _GNU_SOURCE
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#define MAX_COMMAND (4u << 20)

static void fail(const char *what, int err) {
  dprintf(2, "airlock-exec: %s: %s\n", what, strerror(err));
  _exit(127);
}

static void read_all(int fd, char *buf, size_t n) {
  size_t got = 0;
  while (got < n) {
    ssize_t r = read(fd, buf + got, n - got);
    if (r < 0 && errno == EINTR) continue;
    if (r <= 0) fail("reading the command", r < 0 ? errno : EPIPE);
    got += (size_t)r;
  }
}

int main(void) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) fail("socket", errno);
  struct sockaddr_un addr = {.sun_family = AF_UNIX, .sun_path = "/.airlock/cmd.sock"};
  if (connect(fd, (struct sockaddr *)&addr, sizeof addr) != 0) fail("connecting to /.airlock/cmd.sock", errno);
  unsigned char head[4];
  read_all(fd, (char *)head, 4);
  uint32_t len = (uint32_t)head[0] | (uint32_t)head[1] << 8 | (uint32_t)head[2] << 16 | (uint32_t)head[3] << 24;
  if (len == 0 || len > MAX_COMMAND) fail("command length", EINVAL);
  char *buf = malloc(len + 1);
  if (!buf) fail("allocating the command", ENOMEM);
  read_all(fd, buf, len);
  close(fd);
  buf[len] = '\0';
  if (buf[len - 1] != '\0') fail("command framing", EINVAL);

  // Split into strings; the count of strings bounds argv and envp.
  size_t count = 0;
  for (uint32_t i = 0; i < len; i++) count += buf[i] == '\0';
  char **s = calloc(count + 1, sizeof *s);
  if (!s) fail("allocating the command", ENOMEM);
  for (size_t i = 0, at = 0; i < count; i++) {
    s[i] = buf + at;
    at += strlen(buf + at) + 1;
  }
  if (count < 3) fail("command framing", EINVAL);
  char *end = NULL;
  long argc = strtol(s[1], &end, 10);
  if (*s[1] == '\0' || *end != '\0' || argc < 1 || (size_t)argc > count - 2) fail("command argc", EINVAL);
  char **argv = s + 2;
  char **envp = s + 2 + argc;
  // envp is the tail of s, NUL-terminated by calloc's extra slot; argv needs its own terminator.
  char **args = calloc((size_t)argc + 1, sizeof *args);
  if (!args) fail("allocating the command", ENOMEM);
  memcpy(args, argv, (size_t)argc * sizeof *args);
  if (chdir(s[0]) != 0) fail(s[0], errno);
  execve(args[0], args, envp);
  fail(args[0], errno);
  return 127;
}
