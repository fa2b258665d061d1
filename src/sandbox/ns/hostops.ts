// Privileged host operations without an exec per run: one long-lived perl process (perl-base is
// Essential on Debian/Ubuntu) calls mount(2), umount2(2), prlimit64(2) and setns(2) directly for us. Spawning
// `mount`, `umount` and `prlimit` cost ~9 ms of CPU per run (three dynamic-linked execs); a request
// to the helper costs a pipe round trip. The helper reads only what this process writes to its stdin
// (hex-encoded fields, so no path can break the framing), runs as our uid, and exits on stdin EOF.
// Without perl (or on another arch) `hostOps()` is null and the runner execs the binaries as before.
import { spawn, type ChildProcessWithoutNullStreams } from 'node:child_process';
import { arch } from 'node:process';
import { nativeBinaryPath } from '../../base/native.js';

/** Syscall numbers: [mount, umount2, prlimit64, setns, read]. Only the arches our seccomp filter supports. */
const SYSCALLS: Record<string, [number, number, number, number, number]> = { x64: [165, 166, 302, 308, 0], arm64: [40, 39, 261, 268, 63] };

// Requests: `<id> <op> <hex field>...\n`; answers: `<id> <errno> <hex message>\n` (errno 0 = done).
// M target size uid gid mode inodes|-: tmpfs; O lower upper work merged [ro]: overlay (read-only when ro
// is 1); B target: target bound onto itself and made shared (mounts on it later reach the sandboxes
// that bound it); U target: umount (lazy on EBUSY);
// L pid cpuSoft cpuHard fsize|- uid gid [as|- nproc|-]: RLIMIT_CPU, RLIMIT_CORE=0 and optionally
// RLIMIT_FSIZE, RLIMIT_AS and RLIMIT_NPROC on pid (whose real/effective/saved ids are uid/gid).
// S pid: once bwrap's init pid waits on its --block-fd (fd 4), the host's device nodes bound into its
// /dev read-only and /dev/null bound over /dev/tty (what native/tracer.c's seal_device_nodes does
// for a traced launch; it says why), by a child that joins the sandbox's user and mount namespaces.
const PERL = String.raw`
use strict; use warnings; use POSIX ();
my ($MOUNT, $UMOUNT2, $PRLIMIT, $SETNS, $READ) = map { 0 + $_ } @ARGV;
$| = 1;
sub h { my $x = pack('H*', $_[0] // ''); return "$x" }
sub n { my $x = h($_[0]); die "bad number\n" unless $x =~ /^-?\d+$/; return 0 + $x }
sub rl { my ($pid, $res, $soft, $hard) = @_; my $buf = pack('QQ', $soft, $hard);
  return syscall($PRLIMIT, $pid, $res, $buf, 0) }
# MS_REMOUNT | MS_BIND | MS_RDONLY and the flags a mount keeps (the kernel refuses to drop a locked one).
my %FLAG = (nosuid => 2, nodev => 4, noexec => 8, noatime => 1024, nodiratime => 2048, relatime => 2097152);
sub ro_remount { my ($path, $opts) = @_; my $f = 32 | 4096 | 1; $f |= $FLAG{$_} // 0 for split /,/, $opts;
  return syscall($MOUNT, 0, $path, 0, $f, 0) }
sub seal {
  my $pid = shift;
  my $deadline = time + 10;
  while (1) {
    open(my $sc, '<', "/proc/$pid/syscall") or die "the sandbox's init is gone\n";
    last if (<$sc> // '') =~ /^$READ 0x4 /;
    die "the sandbox's init did not reach its block\n" if time > $deadline;
    select(undef, undef, undef, 0.0002);
  }
  my %opts;  # mount point (as the init sees it) -> options of the top mount there
  open(my $mi, '<', "/proc/$pid/mountinfo") or die "mountinfo: $!\n";
  while (<$mi>) { my @f = split / /; $opts{$f[4]} = $f[5] if @f > 5 }
  open(my $mnt, '<', "/proc/$pid/ns/mnt") or die "mount namespace: $!\n";
  my $user = ioctl($mnt, 0xb701, 0) or die "NS_GET_USERNS: $!\n";  # the user namespace owning its mounts
  opendir(my $root, "/proc/$pid/root") or die "root: $!\n";  # bwrap chroots: not the namespace's root
  my $kid = fork() // die "fork: $!\n";
  if ($kid == 0) {
    my @dev = grep { defined $opts{$_} } map { "/dev/$_" } qw(null zero full random urandom tty);
    my $ok = syscall($SETNS, 0 + $user, 0x10000000) == 0 && syscall($SETNS, fileno($mnt), 0x20000) == 0 && chdir($root) && chroot('.');
    for my $d (@dev) { $ok &&= $opts{$d} =~ /(^|,)ro(,|$)/ || ro_remount($d, $opts{$d}) == 0 }
    if ($ok && defined $opts{'/dev/tty'}) {
      my ($null, $tty) = ('/dev/null', '/dev/tty');  # (syscall's strings must be writable)
      $ok = syscall($MOUNT, $null, $tty, 0, 4096, 0) == 0 && ro_remount($tty, $opts{$null}) == 0;
    }
    POSIX::_exit($ok ? 0 : (0 + $!) || 22);
  }
  waitpid($kid, 0);
  $! = $? >> 8 || ($? & 127 ? 4 : 0);
  return $? == 0 ? 0 : -1;
}
while (my $line = <STDIN>) {
  chomp $line;
  my ($id, $op, @a) = split / /, $line;
  my $r = -1; my $err = '';
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
    } elsif ($op eq 'S') {
      $r = seal(n($a[0]));
    } else { $! = 22; }
    $err = "$!" if $r != 0;
    1;
  } or do { $r = -1; $! = 22; $err = $@ || 'bad request'; };
  my $errno = $r == 0 ? 0 : (0 + $! || 22);
  print "$id $errno " . unpack('H*', $err) . "\n";
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

  /** The helper's command: the perl one, or a native one speaking the same protocol (native/idmap.c). */
  constructor(
    private readonly file: string,
    private readonly args: string[],
  ) {}

  private start(): ChildProcessWithoutNullStreams {
    if (this.child) return this.child;
    const c = spawn(this.file, this.args, { stdio: ['pipe', 'pipe', 'pipe'], env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' } });
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

  /** The idmap helper's (native/idmap.c): the overlay over an idmapped clone of `lower` (not attached once mounted) in which uid `from`'s files are `to`'s and every other id is itself. */
  mountIdmappedOverlay(lower: string, upper: string, work: string, merged: string, readOnly: boolean, from: number, to: number): Promise<string | null> {
    return this.request('O', [lower, upper, work, merged, readOnly ? 1 : 0, from, to]);
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

  /** Once bwrap's init `pid` waits to be let go, the device nodes of its /dev read-only and /dev/null over /dev/tty. Null: done; else the error. */
  sealDevices(pid: number): Promise<string | null> {
    return this.request('S', [pid]);
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
 */
export function hostOps(perl: string | null, role: 'setup' | 'cleanup' = 'setup'): HostOps | null {
  const known = helpers.get(role);
  if (known !== undefined) return known;
  const nums = SYSCALLS[arch];
  const made = perl && nums ? new HostOps(perl, ['-e', PERL, ...nums.map(String)]) : null;
  helpers.set(role, made);
  return made;
}

let idmapHelper: HostOps | null | undefined;

/** The process-wide idmap helper (native/idmap.c), or null when it was not built. */
export function idmapOps(): HostOps | null {
  if (idmapHelper === undefined) {
    const bin = nativeBinaryPath('airlock-idmap');
    idmapHelper = bin ? new HostOps(bin, []) : null;
  }
  return idmapHelper;
}
