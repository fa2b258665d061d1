// Privileged host operations without an exec per run: one long-lived perl process (perl-base is
// Essential on Debian/Ubuntu) calls mount(2), umount2(2) and prlimit64(2) directly for us. Spawning
// `mount`, `umount` and `prlimit` cost ~9 ms of CPU per run (three dynamic-linked execs); a request
// to the helper costs a pipe round trip. The helper reads only what this process writes to its stdin
// (hex-encoded fields, so no path can break the framing), runs as our uid, and exits on stdin EOF.
// Without perl (or on another arch) `hostOps()` is null and the runner execs the binaries as before.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { arch } from 'node:process';

/** Syscall numbers: [mount, umount2, prlimit64, unshare, open_tree, move_mount, mount_setattr]. Only the arches our seccomp filter supports. */
const SYSCALLS: Record<string, SyscallNumbers> = { x64: [165, 166, 302, 272, 428, 429, 442], arm64: [40, 39, 261, 97, 428, 429, 442] };
type SyscallNumbers = [number, number, number, number, number, number, number];

// Requests: `<id> <op> <hex field>...\n`; answers: `<id> <errno> <hex message>\n` (errno 0 = done).
// M target size uid gid mode inodes|-: tmpfs; O lower upper work merged [ro]: overlay (read-only when ro
// is 1); B target: target bound onto itself and made shared (mounts on it later reach the sandboxes
// that bound it); U target: umount (lazy on EBUSY);
// L pid cpuSoft cpuHard fsize|- uid gid [as|- nproc|-]: RLIMIT_CPU, RLIMIT_CORE=0 and optionally
// RLIMIT_FSIZE, RLIMIT_AS and RLIMIT_NPROC on pid (whose real/effective/saved ids are uid/gid);
// I source target from to: an idmapped clone of source (not its submounts; read-only, nosuid, nodev)
// attached at target, in which the files of uid `from` are uid `to`'s and every other id is itself
// (nothing shows as `from`, and files of `to` show as nobody's); D target: umount2(MNT_DETACH).
const PERL = String.raw`
use strict; use warnings; use POSIX ();
my ($MOUNT, $UMOUNT2, $PRLIMIT, $UNSHARE, $OPEN_TREE, $MOVE_MOUNT, $MOUNT_SETATTR) = map { 0 + $_ } @ARGV;
$| = 1;
my $why = '';
$SIG{CHLD} = 'IGNORE';  # the user namespaces' children reap themselves
# An idmap needs a user namespace with its mapping: a child unshares one and waits while we write its
# maps and keep a descriptor of it (the mount keeps its own reference once set). One such child is
# made ahead of need after each use: fork and unshare cost ~2 ms on a VM, more than the rest.
my $spare;
sub userns_child {
  pipe(my $r1, my $w1) or return undef; pipe(my $r2, my $w2) or return undef;
  my $pid = fork(); return undef unless defined $pid;
  if ($pid == 0) { close $r1; close $w2; syswrite($w1, syscall($UNSHARE, 0x10000000) == 0 ? 'y' : 'n'); sysread($r2, my $b, 1); POSIX::_exit(0); }
  close $w1; close $r2;
  return { pid => $pid, ready => $r1, release => $w2 };
}
sub idmapped { my ($src, $t, $from, $to) = @_;
  my $max = 4294967295;
  my @lines = ([0, 0, $from], [$from, $to, 1], [$from + 1, $from + 1, $to - $from - 1], [$to + 1, $to + 1, $max - $to - 1]);
  my $map = join('', map { "$_->[0] $_->[1] $_->[2]\n" } grep { $_->[2] > 0 } @lines);
  my $c = $spare // userns_child(); $spare = undef;
  unless ($c) { $why = 'fork'; return -1 }
  my ($r, $tree, $pid) = (-1, -1, $c->{pid});
  {
    my $ok = ''; sysread($c->{ready}, $ok, 1);
    if ($ok ne 'y') { $why = 'unshare(CLONE_NEWUSER)'; $! = 1; last }
    my ($u, $g, $ns);
    unless (open($u, '>', "/proc/$pid/uid_map") && print($u $map) && close($u)) { $why = 'uid_map'; last }
    unless (open($g, '>', "/proc/$pid/gid_map") && print($g "0 0 $max\n") && close($g)) { $why = 'gid_map'; last }
    unless (open($ns, '<', "/proc/$pid/ns/user")) { $why = 'the user namespace'; last }
    $tree = syscall($OPEN_TREE, -100, $src, 1 | 02000000);  # OPEN_TREE_CLONE|OPEN_TREE_CLOEXEC
    if ($tree < 0) { $why = 'open_tree'; last }
    my $attr = pack('QQQQ', 0x00100000 | 1 | 2 | 4, 0, 0, fileno($ns));  # MOUNT_ATTR_IDMAP|RDONLY|NOSUID|NODEV
    my $e = '';
    if (syscall($MOUNT_SETATTR, $tree, $e, 0x1000, $attr, 32) != 0) { $why = 'mount_setattr (the filesystem may not support idmapped mounts)'; last }  # AT_EMPTY_PATH
    if (syscall($MOVE_MOUNT, $tree, $e, -100, $t, 4) != 0) { $why = 'move_mount'; last }  # MOVE_MOUNT_F_EMPTY_PATH
    $r = 0;
  }
  my $errno = 0 + $!;
  POSIX::close($tree) if $tree >= 0;
  close $c->{release}; close $c->{ready};
  $! = $errno;
  return $r;
}
sub h { my $x = pack('H*', $_[0] // ''); return "$x" }
sub n { my $x = h($_[0]); die "bad number\n" unless $x =~ /^-?\d+$/; return 0 + $x }
sub rl { my ($pid, $res, $soft, $hard) = @_; my $buf = pack('QQ', $soft, $hard);
  return syscall($PRLIMIT, $pid, $res, $buf, 0) }
while (my $line = <STDIN>) {
  chomp $line;
  my ($id, $op, @a) = split / /, $line;
  my $r = -1; my $err = ''; $why = '';
  eval {
    if ($op eq 'M') {
      my $mode = h($a[4]); die "bad mode\n" unless $mode =~ /^0[0-7]{3}$/;
      my $data = 'size=' . n($a[1]) . ",mode=$mode,uid=" . n($a[2]) . ',gid=' . n($a[3]);
      $data .= ',nr_inodes=' . n($a[5]) if h($a[5]) ne '-';
      my ($src, $fs, $t) = ('airlock-out', 'tmpfs', h($a[0]));
      $r = syscall($MOUNT, $src, $t, $fs, 6, $data);  # MS_NOSUID|MS_NODEV
    } elsif ($op eq 'O') {
      # metacopy and redirect_dir off, whatever the kernel's defaults: the host diff reads a copied-up
      # file's data from the upper dir, and a renamed directory as a deletion and an addition.
      my $data = 'lowerdir=' . h($a[0]) . ',upperdir=' . h($a[1]) . ',workdir=' . h($a[2]) . ',metacopy=off,redirect_dir=off';
      my ($src, $fs, $t) = ('airlock-scope', 'overlay', h($a[3]));
      my $ro = defined $a[4] && h($a[4]) eq '1' ? 1 : 0;  # MS_RDONLY
      $r = syscall($MOUNT, $src, $t, $fs, $ro, $data);
    } elsif ($op eq 'B') {
      my $t = h($a[0]);
      $r = syscall($MOUNT, $t, $t, 0, 4096, 0);  # MS_BIND
      if ($r == 0) {
        $r = syscall($MOUNT, 0, $t, 0, 1048576, 0);  # MS_SHARED
        if ($r != 0) { my $e = 0 + $!; syscall($UMOUNT2, $t, 2); $! = $e; }  # no half-made mount
      }
    } elsif ($op eq 'U') {
      my $t = h($a[0]);
      $r = syscall($UMOUNT2, $t, 0);
      $r = syscall($UMOUNT2, $t, 2) if $r != 0 && $! == 16;  # EBUSY -> MNT_DETACH
    } elsif ($op eq 'L') {
      # prlimit64 on another uid needs CAP_SYS_RESOURCE (some hosts drop it) unless our real ids are
      # the target's: take them for the call (the effective uid stays ours), then restore them.
      my ($pid, $uid, $gid) = (n($a[0]), n($a[4]), n($a[5]));
      my ($ru, $rg) = ($<, (split / /, $()[0]);
      $( = $gid; $< = $uid;
      $r = rl($pid, 0, n($a[1]), n($a[2]));
      $r = rl($pid, 4, 0, 0) if $r == 0;
      $r = rl($pid, 1, n($a[3]), n($a[3])) if $r == 0 && h($a[3]) ne '-';
      $r = rl($pid, 9, n($a[6]), n($a[6])) if $r == 0 && defined $a[6] && h($a[6]) ne '-';
      $r = rl($pid, 6, n($a[7]), n($a[7])) if $r == 0 && defined $a[7] && h($a[7]) ne '-';
      my $e = 0 + $!;
      $< = $ru; $( = $rg;
      exit 70 if $< != $ru || (split / /, $()[0] != $rg;  # never keep running with the wrong ids
      $! = $e;
    } elsif ($op eq 'D') {
      $r = syscall($UMOUNT2, h($a[0]), 2);
    } elsif ($op eq 'I') {
      my ($from, $to) = (n($a[2]), n($a[3]));
      die "bad ids\n" unless $from > 0 && $from < $to && $to < 4294967295;
      $r = idmapped(h($a[0]), h($a[1]), $from, $to);
    } else { $! = 22; }
    $err = ($why ? "$why: " : '') . "$!" if $r != 0;
    1;
  } or do { $r = -1; $! = 22; $err = $@ || 'bad request'; };
  my $errno = $r == 0 ? 0 : (0 + $! || 22);
  print "$id $errno " . unpack('H*', $err) . "\n";
  $spare = userns_child() if $op eq 'I' && !$spare;  # after the answer: off the next request's path
}
`;

const hex = (s: string | number): string => Buffer.from(String(s), 'utf8').toString('hex');

interface Pending {
  resolve: (err: string | null) => void;
}

export class HostOps {
  private child: ChildProcessWithoutNullStreams | null = null;
  private readonly pending = new Map<number, Pending>();
  private nextId = 1;
  private buf = '';

  constructor(
    private readonly perl: string,
    private readonly nums: SyscallNumbers,
  ) {}

  private start(): ChildProcessWithoutNullStreams {
    if (this.child) return this.child;
    const c = spawn(this.perl, ['-e', PERL, ...this.nums.map(String)], { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' } });
    c.stdout.setEncoding('utf8');
    c.stdout.on('data', (d: string) => this.onData(d));
    c.stderr.resume();
    const fail = (why: string): void => {
      if (this.child === c) this.child = null;
      for (const [, p] of this.pending) p.resolve(`the host helper stopped (${why})`);
      this.pending.clear();
    };
    c.on('error', (e) => fail(e.message));
    c.on('close', (code) => fail(`exit ${code}`));
    c.stdin.on('error', () => undefined);
    this.child = c;
    this.idle();
    return c;
  }

  private onData(d: string): void {
    this.buf += d;
    for (let nl = this.buf.indexOf('\n'); nl >= 0; nl = this.buf.indexOf('\n')) {
      const line = this.buf.slice(0, nl);
      this.buf = this.buf.slice(nl + 1);
      const [id, errno, msg] = line.split(' ');
      const p = this.pending.get(Number(id));
      if (!p) continue;
      this.pending.delete(Number(id));
      p.resolve(errno === '0' ? null : `${Buffer.from(msg ?? '', 'hex').toString('utf8').trim() || 'failed'} (errno ${errno})`);
    }
    this.idle();
  }

  /** Keep node alive only while a request is in flight (an idle helper must not hold the process). */
  private idle(): void {
    const c = this.child;
    if (!c) return;
    const busy = this.pending.size > 0;
    for (const s of [c.stdout, c.stderr, c.stdin] as unknown as { ref?: () => void; unref?: () => void }[]) (busy ? s.ref : s.unref)?.call(s);
    if (busy) c.ref();
    else c.unref();
  }

  private request(op: string, fields: (string | number)[]): Promise<string | null> {
    return new Promise((resolve) => {
      const c = this.start();
      const id = this.nextId++;
      this.pending.set(id, { resolve });
      this.idle();
      // The requests of one tick (a run's two tmpfs mounts) go in one write: each write wakes the
      // helper on another core, which on a VM costs more than the request itself.
      if (!c.stdin.writableCorked) {
        c.stdin.cork();
        process.nextTick(() => c.stdin.uncork());
      }
      c.stdin.write(`${id} ${op} ${fields.map(hex).join(' ')}\n`);
    });
  }

  /** Size-capped tmpfs (nosuid, nodev, root dir `mode` owned by uid:gid, at most `inodes` entries) on `dir`. Null: done; else the error. */
  mountTmpfs(dir: string, sizeBytes: number, uid: number, gid: number, mode = 0o755, inodes?: number): Promise<string | null> {
    return this.request('M', [dir, sizeBytes, uid, gid, `0${mode.toString(8)}`, inodes ?? '-']);
  }

  mountOverlay(lower: string, upper: string, work: string, merged: string, readOnly = false): Promise<string | null> {
    return this.request('O', [lower, upper, work, merged, readOnly ? 1 : 0]);
  }

  /** An idmapped, read-only clone of `source` at `target`: the files of uid `from` show as `to`'s, every other id as itself. */
  idmappedClone(source: string, target: string, from: number, to: number): Promise<string | null> {
    return this.request('I', [source, target, from, to]);
  }

  /** umount2(dir, MNT_DETACH): gone from the tree at once, freed when its last user goes. */
  detach(dir: string): Promise<string | null> {
    return this.request('D', [dir]);
  }

  /** Binds `dir` onto itself and makes it shared: what is mounted on it later also appears in every sandbox that bound it meanwhile. */
  sharedSelfBind(dir: string): Promise<string | null> {
    return this.request('B', [dir]);
  }

  /** umount2(dir, 0), then MNT_DETACH when busy. */
  unmount(dir: string): Promise<string | null> {
    return this.request('U', [dir]);
  }

  /**
   * RLIMIT_CPU soft:hard seconds, RLIMIT_CORE 0 and (optionally) RLIMIT_FSIZE on `pid`, a process running
   * as uid:gid (its future children inherit them). Limits are only lowered. `backstop`: RLIMIT_AS and
   * RLIMIT_NPROC where no cgroup limits memory and processes (set on bwrap's init after it made its
   * user namespace, RLIMIT_NPROC counts the processes of that namespace only).
   */
  setRlimits(pid: number, uid: number, gid: number, cpuSoft: number, cpuHard: number, fsize: number | null, backstop: { asBytes: number | null; nproc: number | null } = { asBytes: null, nproc: null }): Promise<string | null> {
    return this.request('L', [pid, cpuSoft, cpuHard, fsize ?? '-', uid, gid, backstop.asBytes ?? '-', backstop.nproc ?? '-']);
  }

  /** Stop the helper (tests; the process otherwise ends it by closing stdin at exit). */
  close(): void {
    this.child?.stdin.end();
    this.child = null;
  }
}

const helpers = new Map<string, HostOps | null>();

/**
 * The process-wide helper, or null when perl or the syscall table is missing (the runner then execs
 * binaries). `role` 'cleanup' is a second helper for the unmounts after runs: an unmount waits for
 * the kernel (RCU grace periods, milliseconds), and the next run's mounts must not queue behind it.
 * 'idmap' makes the idmapped clones of scopes: it forks a child per clone, and the other helpers'
 * mounts must not queue behind a fork either.
 */
export function hostOps(perl: string | null, role: 'setup' | 'cleanup' | 'idmap' = 'setup'): HostOps | null {
  const known = helpers.get(role);
  if (known !== undefined) return known;
  const nums = SYSCALLS[arch];
  const made = perl && nums ? new HostOps(perl, nums) : null;
  helpers.set(role, made);
  return made;
}
