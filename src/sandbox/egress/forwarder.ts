// The bridge from the sandbox's own network namespace to the host proxy.
//
// The sandbox keeps its empty network namespace (loopback only). The host starts one small perl
// process per run that joins *only that network namespace* (setns(2) on /proc/<bwrap init>/ns/net,
// while bwrap's init is still blocked on --block-fd, so the program never runs without it), binds
// 127.0.0.1:PROXY_PORT there, drops to the sandbox's host uid, and pumps every accepted connection to
// the host proxy's unix socket. It stays in the host's mount, pid and user namespaces: the program
// cannot see it, signal it or ptrace it, it is not in the run's cgroup, and it is not under strace,
// so it adds nothing to the observation. Everything it carries ends at the proxy, which decides.
// perl-base is Essential on Debian/Ubuntu (the host helper in ns/hostops.ts already relies on it).
import { spawn, type ChildProcess } from 'node:child_process';
import { arch } from 'node:process';
import { DEFAULT_OPEN_CONNECTIONS, type NetworkCaps } from './records.js';

/** The proxy's address inside the sandbox (its own loopback). */
export const PROXY_HOST = '127.0.0.1';
export const PROXY_PORT = 3128;

/** setns(2) per arch (the arches our seccomp filter supports). */
const SETNS: Record<string, number> = { x64: 308, arm64: 268 };

// Args: setns-nr ns-path unix-socket uid gid port max-pairs. Prints "ready\n" once listening (or
// "error: ..."). Exits on stdin EOF (the host went away). One process, select(2) loop, per-direction
// buffers with back-pressure (a side is read only when the other side's buffer is empty). Its own
// descriptors are bounded too: at most max-pairs bridged connections (past it, accepted and closed at
// once), and a pair ends as soon as the proxy's side has ended and its last bytes reached the program
// (an idle program cannot keep a pair the proxy already closed).
const PERL = String.raw`
use strict; use warnings; use Socket qw(:DEFAULT SOL_SOCKET SO_REUSEADDR IPPROTO_IP SHUT_WR); use POSIX ();
use Fcntl qw(F_GETFL F_SETFL O_NONBLOCK);
my ($SETNS, $nspath, $sockpath, $uid, $gid, $port, $maxpairs) = @ARGV;
$| = 1; $SIG{PIPE} = 'IGNORE';
sub fail { print "error: $_[0]\n"; exit 1 }
open(my $ns, '<', $nspath) or fail("open $nspath: $!");
syscall($SETNS + 0, fileno($ns), 0x40000000) == 0 or fail("setns: $!");
close $ns;
socket(my $l, PF_INET, SOCK_STREAM, 0) or fail("socket: $!");
setsockopt($l, SOL_SOCKET, SO_REUSEADDR, 1);
# IP_FREEBIND (15): bwrap brings the sandbox's loopback up only after we release its init.
setsockopt($l, IPPROTO_IP, 15, 1) or fail("IP_FREEBIND: $!");
bind($l, pack_sockaddr_in($port, inet_aton('127.0.0.1'))) or fail("bind: $!");
listen($l, 128) or fail("listen: $!");
$) = "$gid $gid"; POSIX::setgid($gid) or fail("setgid: $!"); POSIX::setuid($uid) or fail("setuid: $!");
fail('privileges not dropped') unless $< == $uid && $> == $uid && $( == $gid;
sub nb { my $f = fcntl($_[0], F_GETFL, 0); fcntl($_[0], F_SETFL, $f | O_NONBLOCK) }
nb($l);
my (%fh, %peer, %buf, %eof, %shut, %up);
sub drop { my @x = (0 + $_[0]); push @x, 0 + $peer{$_[0]} if defined $peer{$_[0]};
  for my $x (@x) { next unless $fh{$x}; close $fh{$x}; delete $fh{$x}; delete $peer{$x}; delete $buf{$x}; delete $eof{$x}; delete $shut{$x}; delete $up{$x} } }
print "ready\n";
while (1) {
  my ($rin, $win) = ('', '');
  vec($rin, fileno(STDIN), 1) = 1; vec($rin, fileno($l), 1) = 1;
  for my $f (keys %fh) {
    my $p = $peer{$f};
    vec($rin, $f, 1) = 1 if !$eof{$f} && defined $p && $fh{$p} && length($buf{$p}) == 0;
    vec($win, $f, 1) = 1 if length($buf{$f}) > 0;
  }
  my $n = select(my $rout = $rin, my $wout = $win, undef, undef);
  if ($n < 0) { next if $!{EINTR}; fail("select: $!") }
  if (vec($rout, fileno(STDIN), 1)) { my $r = sysread(STDIN, my $x, 64); exit 0 unless $r }
  if (vec($rout, fileno($l), 1)) {
    while (accept(my $c, $l)) {
      if (keys(%fh) >= 2 * $maxpairs) { close $c; next }
      socket(my $u, PF_UNIX, SOCK_STREAM, 0) or do { close $c; next };
      unless (connect($u, pack_sockaddr_un($sockpath))) { close $c; close $u; next }
      nb($c); nb($u);
      my ($a, $b) = (fileno($c), fileno($u));
      $fh{$a} = $c; $fh{$b} = $u; $peer{$a} = $b; $peer{$b} = $a; $buf{$a} = ''; $buf{$b} = ''; $up{$b} = 1;
    }
  }
  for my $f (keys %fh) {
    next unless $fh{$f};
    my $p = $peer{$f};
    if (vec($wout, $f, 1) && length($buf{$f}) > 0) {
      my $w = syswrite($fh{$f}, $buf{$f});
      if (!defined $w) { drop($f) unless $!{EAGAIN}; next }
      substr($buf{$f}, 0, $w, '');
    }
    if ($fh{$f} && length($buf{$f}) == 0 && defined $p && $eof{$p} && !$shut{$f}) { if ($up{$p}) { drop($f); next } shutdown($fh{$f}, SHUT_WR); $shut{$f} = 1 }
    next unless $fh{$f} && vec($rout, $f, 1) && defined $p && $fh{$p};
    my $r = sysread($fh{$f}, my $data, 262144);
    if (!defined $r) { drop($f) unless $!{EAGAIN}; next }
    if ($r == 0) { $eof{$f} = 1; if (length($buf{$p}) == 0) { if ($up{$f}) { drop($f); next } shutdown($fh{$p}, SHUT_WR); $shut{$p} = 1 } }
    else {
      my $w = syswrite($fh{$p}, $data);
      if (!defined $w) { if ($!{EAGAIN}) { $w = 0 } else { drop($f); next } }
      $buf{$p} .= substr($data, $w) if $w < $r;
    }
    drop($f) if $fh{$f} && $eof{$f} && $eof{$p} && length($buf{$f}) == 0 && length($buf{$p}) == 0;
  }
}
`;

/**
 * The bridge's own cap on bridged connections: a few past the proxy's open-connections cap, so the
 * proxy sees (and records) the one over its cap first; the bridge's cap only bounds its descriptors.
 */
export const bridgePairs = (caps: NetworkCaps): number => (caps.openConnections ?? DEFAULT_OPEN_CONNECTIONS) + 8;

export interface Forwarder {
  child: ChildProcess;
  /** Ends the forwarder (closing every bridged connection). */
  stop(): void;
}

/**
 * Starts the bridge in the network namespace of `initPid` (bwrap's init, still blocked). Resolves once
 * it listens, or rejects with why (the caller then ends the run: no bridge, no network).
 */
export function startForwarder(opts: { perl: string; initPid: number; socketPath: string; uid: number; gid: number; maxPairs: number; port?: number; timeoutMs?: number }): Promise<Forwarder> {
  const nr = SETNS[arch];
  if (nr === undefined) return Promise.reject(new Error(`no setns syscall number for arch ${arch}`));
  const child = spawn(opts.perl, ['-e', PERL, String(nr), `/proc/${opts.initPid}/ns/net`, opts.socketPath, String(opts.uid), String(opts.gid), String(opts.port ?? PROXY_PORT), String(opts.maxPairs)], {
    stdio: ['pipe', 'pipe', 'pipe'],
    env: { PATH: '/usr/bin:/bin', LC_ALL: 'C' },
  });
  const stop = (): void => {
    child.stdin?.end();
    if (child.exitCode === null && child.signalCode === null) child.kill('SIGKILL');
  };
  return new Promise((resolve, reject) => {
    let out = '';
    let err = '';
    const timer = setTimeout(() => {
      stop();
      reject(new Error('the network bridge did not start within the time allowed'));
    }, opts.timeoutMs ?? 5000);
    child.stderr!.on('data', (d: Buffer) => (err = (err + d.toString('utf8')).slice(0, 2000)));
    child.stdout!.on('data', (d: Buffer) => {
      out += d.toString('utf8');
      if (out.includes('ready\n')) {
        clearTimeout(timer);
        resolve({ child, stop });
      } else if (/^error: .*\n/m.test(out)) {
        clearTimeout(timer);
        stop();
        reject(new Error(`the network bridge failed: ${out.replace(/^error: /, '').trim().slice(0, 300)}`));
      }
    });
    child.on('error', (e) => {
      clearTimeout(timer);
      reject(new Error(`cannot start the network bridge: ${e.message}`));
    });
    child.on('exit', (code) => {
      clearTimeout(timer);
      reject(new Error(`the network bridge exited (${code}) before listening: ${(out + err).trim().slice(0, 300)}`));
    });
    child.stdin!.on('error', () => undefined);
  });
}
