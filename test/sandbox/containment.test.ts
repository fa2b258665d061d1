// Hostile programs against the ns sandbox: each attack must fail AND be reported by the observation.
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { existsSync, mkdtempSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { doctor } from '../../src/sandbox/doctor.js';
import { freshOut, LIMITS, py, pyUnderStrace, run, text } from './helpers-ns.js';
import { RUN_ID_RANGE } from '../../src/sandbox/run-ids.js';

const nets = (o: Awaited<ReturnType<typeof run>>) => o.sideEffects?.networkAttempts ?? [];

test('TCP egress fails and the attempt (address, port, tcp) is reported', async () => {
  const o = await py("import socket\ns=socket.socket()\ntry:\n s.connect(('1.1.1.1',443)); print('CONNECTED')\nexcept OSError as e: print('blocked', e.errno)");
  assert.match(o.stdout.bytes.toString(), /^blocked/, text(o));
  assert.ok(nets(o).some((n) => n.address === '1.1.1.1' && n.port === 443 && n.protocol === 'tcp' && n.result !== 'ok'), JSON.stringify(nets(o)));
});

test('UDP egress fails and the attempt is reported', async () => {
  const o = await py("import socket\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ntry:\n s.sendto(b'x',('8.8.8.8',53)); print('SENT')\nexcept OSError as e: print('blocked', e.errno)");
  assert.match(o.stdout.bytes.toString(), /^blocked/, text(o));
  assert.ok(nets(o).some((n) => n.address === '8.8.8.8' && n.port === 53 && n.protocol === 'udp'), JSON.stringify(nets(o)));
});

test('DNS: resolution fails and an explicit DNS query to a public resolver fails and is reported', async () => {
  const q = "q=b'\\x12\\x34\\x01\\x00\\x00\\x01\\x00\\x00\\x00\\x00\\x00\\x00\\x07example\\x03com\\x00\\x00\\x01\\x00\\x01'";
  const o = await py(`import socket\n${q}\ntry:\n print(socket.getaddrinfo('example.com', 80)); print('RESOLVED')\nexcept OSError: print('noresolve')\ns=socket.socket(socket.AF_INET, socket.SOCK_DGRAM)\ns.settimeout(0.2)\ntry:\n s.sendto(q,('1.1.1.1',53)); print('ANSWER', s.recv(512))\nexcept OSError as e: print('blocked')`);
  assert.equal(o.stdout.bytes.toString(), 'noresolve\nblocked\n', text(o));
  assert.ok(nets(o).some((n) => n.address === '1.1.1.1' && n.port === 53 && n.protocol === 'udp'), JSON.stringify(nets(o)));
});

test('a unix socket to a host service (PostgreSQL) cannot be reached, the attempt is reported', async (t) => {
  const sock = '/var/run/postgresql/.s.PGSQL.5432';
  if (!existsSync(sock)) return t.skip(`no host service socket at ${sock} on this host`);
  const o = await py(`import socket\ns=socket.socket(socket.AF_UNIX)\ntry:\n s.connect('${sock}'); print('CONNECTED')\nexcept OSError as e: print('blocked', e.errno)`);
  assert.match(o.stdout.bytes.toString(), /^blocked/, text(o));
  assert.ok(nets(o).some((n) => n.family === 'unix' && n.path === sock && n.result !== 'ok'), JSON.stringify(nets(o)));
});

test('AF_VSOCK (not confined by the network namespace: it reaches the VM\'s host and shares its ports) is trapped and reported', async (t) => {
  // A host process holds a vsock port; a sandbox that can make a vsock socket finds that port taken
  // (EADDRINUSE): its network namespace does not separate vsock, so a connect would leave the machine.
  const port = 40000 + (process.pid % 20000);
  const holder = spawn('python3', ['-c', `import socket,sys\ns=socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM)\ns.bind((socket.VMADDR_CID_ANY, ${port}))\ns.listen(1)\nprint('held', flush=True)\nsys.stdin.read()`], { stdio: ['pipe', 'pipe', 'pipe'] });
  t.after(() => holder.kill());
  const held = await new Promise<string>((resolve) => {
    let out = '';
    holder.stdout.on('data', (d: Buffer) => { out += d.toString(); if (out.includes('held')) resolve('held'); });
    holder.on('exit', () => resolve(out));
  });
  if (held !== 'held') return t.skip('no AF_VSOCK on this host');
  const o = await py(`import socket\ntry:\n s=socket.socket(socket.AF_VSOCK, socket.SOCK_STREAM); s.bind((socket.VMADDR_CID_ANY, ${port})); print('BOUND')\nexcept OSError as e: print('vsock', e.errno)`);
  assert.ok(!/BOUND|vsock 98/.test(o.stdout.bytes.toString()), `the sandbox reached the host's vsock ports: ${text(o)}`);
  assert.equal(o.status, 'POLICY_ABORTED', text(o));
  assert.ok(o.sideEffects?.privilegedSyscalls.some((p) => p.name === 'socket' && p.outcome === 'trapped'), JSON.stringify(o.sideEffects?.privilegedSyscalls));
});

test('host secrets: /root, /etc/shadow and the host environment are absent', async () => {
  process.env.AIRLOCK_TEST_SECRET = 'hunter2-host-secret';
  const o = await run(['/bin/sh', '-c', 'ls -A /root 2>&1; cat /etc/shadow 2>&1; cat /root/.ssh/id_rsa /home/admin/.aws/credentials 2>/dev/null; cat /proc/1/environ 2>&1 | tr "\\0" "\\n"; env; ls /home /run /var 2>&1; cat /etc/passwd']);
  delete process.env.AIRLOCK_TEST_SECRET;
  const out = o.stdout.bytes.toString();
  assert.ok(!out.includes('hunter2'), 'the host environment leaked');
  assert.match(out, /shadow: No such file/);
  assert.ok(!/\.bashrc|\.ssh|\.profile/.test(out), `something of /root is visible: ${out}`);
  assert.ok(!out.includes('postgres:'), 'the host passwd is visible');
  assert.match(out, /\/home'?: No such file/);
  // ...and the Observation names each secret place the program tried (when a tracer observed the run)
  if (o.sideEffects) {
    const reads = o.sideEffects.fileAccess.filter((a) => a.access === 'read').map((a) => a.path);
    // (opens are observed; `ls /home` only stats the path, which is not)
    for (const p of ['/etc/shadow', '/root', '/root/.ssh/id_rsa', '/home/admin/.aws/credentials']) assert.ok(reads.includes(p), `the read of ${p} is reported: ${JSON.stringify(reads)}`);
    assert.ok(!reads.some((p) => p.startsWith('/etc/passwd')), 'the sandbox\'s own /etc/passwd is no secret');
  } else assert.fail(`side effects were not observed: ${o.sideEffectsUnavailable}`);
  // /etc is a prepared copy: only the loader's files, the time zone and generated identity files.
  const etc = await run(['/bin/sh', '-c', 'ls -A /etc; echo x > /etc/passwd 2>&1 || echo READONLY']);
  const names = etc.stdout.bytes.toString().split('\n').filter(Boolean);
  assert.equal(names.pop(), 'READONLY');
  assert.ok(names.every((n) => ['alternatives', 'group', 'hosts', 'ld.so.cache', 'ld.so.conf', 'ld.so.conf.d', 'localtime', 'nsswitch.conf', 'passwd'].includes(n)), names.join(' '));
});

test('no descriptor of the host reaches the sandbox; its own stdout cannot be reopened to read or steal it', async () => {
  const code = [
    'import os',
    'held = []',
    'for fd in range(3, 4096):',
    '  try: os.fstat(fd); held.append(fd)',
    '  except OSError: pass',
    'print("held", held)',
    'try:',
    '  r = os.open("/proc/self/fd/1", os.O_RDONLY | os.O_NONBLOCK); print("REOPENED", os.read(r, 100))',
    'except OSError as e: print("reopen", e.errno)',
  ].join('\n');
  const o = await py(code);
  const [held, reopen] = o.stdout.bytes.toString().split('\n');
  assert.equal(held, 'held []', text(o));
  // Through the tracer, stdout is a FIFO owned by root (0600): reopening it is refused (EACCES), so the
  // program cannot drain what the host is reading. (Node's spawn gives a pipe, which it could reopen.)
  if (o.host.syscallTracer === 'airlock-tracer') assert.equal(reopen, 'reopen 13', text(o));
});

test('a descriptor the host process inherited without close-on-exec never reaches the program (at most an ended socket of node\'s stands at its number), whichever way bwrap is started', async () => {
  // A shell, a CI runner or socket activation can hand Airlock such a descriptor (here fd 50, a host
  // file opened for appending): node's spawn passes every one of them on, through bwrap, to the program.
  const dir = mkdtempSync(join(tmpdir(), 'airlock-ns-inherited-'));
  const victim = join(dir, 'host-file');
  writeFileSync(victim, 'host\n');
  const script = `
    const { runNs, sandboxIdle } = await import(${JSON.stringify(new URL('../../src/sandbox/ns/runner.js', import.meta.url).href)});
    const o = await runNs({ argv: ['/bin/bash', '-c', 'echo pwned >&50 && echo WROTE; for f in /proc/self/fd/*; do echo "\${f##*/} $(readlink $f)"; done'], outDir: process.env.OUT, limits: ${JSON.stringify(LIMITS)} });
    await sandboxIdle();
    console.log(JSON.stringify({ status: o.status, tracer: o.host.syscallTracer, stdout: o.stdout.bytes.toString() }));`;
  for (const tracer of ['strace', undefined]) {
    const env: NodeJS.ProcessEnv = { ...process.env, OUT: freshOut() };
    if (tracer) env.AIRLOCK_SYSCALL_TRACER = tracer;
    else delete env.AIRLOCK_SYSCALL_TRACER;
    // A shell's redirection, as a parent would leave it (node's own stdio options set close-on-exec).
    const r = spawnSync('/bin/bash', ['-c', 'exec "$0" --input-type=module -e "$1" 50>>"$2"', process.execPath, script, victim], { stdio: ['ignore', 'pipe', 'pipe'], encoding: 'utf8', timeout: 60_000, env });
    assert.equal(r.status, 0, r.stderr);
    const o = JSON.parse(r.stdout.trim().split('\n').pop()!) as { status: string; tracer: string | null; stdout: string };
    assert.ok(!o.stdout.includes('WROTE'), `the program wrote to the host's descriptor (tracer ${o.tracer}): ${o.stdout}`);
    assert.equal(readFileSync(victim, 'utf8'), 'host\n', `the host file was written through an inherited descriptor (tracer ${o.tracer})`);
    // What is left at such a number is a socket of node's, ended (the loop's own, gone when readlink looks, shows nothing).
    const fds = o.stdout.split('\n').map((l) => /^(\d+) (.*)$/.exec(l)).filter((m) => m !== null && Number(m[1]) > 2 && m[2] !== '' && !m[2]!.startsWith('/proc/'));
    assert.deepEqual(fds.filter((m) => !/^socket:\[\d+\]$/.test(m![2]!)).map((m) => m![0]), [], `descriptors beyond stdio: ${o.stdout}`);
  }
});

test('writing outside /out fails; only /out changes are reported', async () => {
  const marker = join(tmpdir(), `airlock-escape-${process.pid}`);
  const o = await run(['/bin/sh', '-c', `for p in /etc/x /usr/x /in/x /x /proc/x ${marker}; do echo pwned > $p 2>/dev/null && echo "WROTE $p"; done; echo ok > /out/ok`]);
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.deepEqual(o.stdout.bytes.toString().split('\n').filter((l) => l.startsWith('WROTE') && !l.includes(marker)), []);
  assert.ok(!existsSync(marker), 'the sandbox /tmp reached the host /tmp');
  assert.deepEqual(o.fs.out?.map((c) => c.path), ['/out/ok']);
  // Every refused write is in the Observation, with the error the kernel gave; /out and /tmp writes are not
  const writes = new Map(o.sideEffects?.fileAccess.filter((a) => a.access === 'write').map((a) => [a.path, a.result]));
  for (const p of ['/etc/x', '/usr/x', '/in/x', '/x', '/proc/x']) assert.ok(writes.has(p) && writes.get(p) !== 'ok', `the write to ${p} is reported as refused: ${JSON.stringify([...writes])}`);
  assert.ok(!writes.has('/out/ok') && !writes.has(marker), 'writes inside the writable areas are not attempts');
});

test('a symlink and a hard link in /out pointing outside are reported as links, never followed', async () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-ns-link-'));
  writeFileSync(join(dir, 'f.txt'), 'input');
  const outDir = join(dir, 'out');
  const o = await run(['/bin/sh', '-c', 'ln -s /etc/passwd /out/sl; ln -s /root/.ssh/id_rsa /out/sl2; ln /in/f.txt /out/hl 2>&1 || echo HLFAIL; echo a > /out/a; ln /out/a /out/b'], { inputs: [{ hostPath: join(dir, 'f.txt'), name: 'f.txt' }], outDir });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.match(o.stdout.bytes.toString(), /HLFAIL/, 'a hard link to a file outside /out must fail (EXDEV)');
  const by = new Map((o.fs.out ?? []).map((c) => [c.path, c]));
  assert.equal(by.get('/out/sl')?.type, 'symlink');
  assert.equal(by.get('/out/sl')?.linkTarget, '/etc/passwd');
  assert.equal(by.get('/out/sl')?.sha256After, createHash('sha256').update('/etc/passwd').digest('hex'), 'a symlink is hashed as its target text, never through');
  assert.ok(!by.has('/out/hl'));
  assert.ok(by.get('/out/b')?.type === 'hardlink' || by.get('/out/a')?.type === 'hardlink' || (by.get('/out/b')?.nlink ?? 1) > 1, JSON.stringify(o.fs.out));
  // Outputs stay data: the link is in the record (with its target text), never recreated on the host.
  assert.deepEqual(readdirSync(outDir).sort(), ['a', 'b'], 'no link under the host copy of /out');
});

test('a double-forked daemon does not outlive the run', async () => {
  const tag = String(700000 + (process.pid % 99999));
  const o = await run(['/bin/sh', '-c', `(setsid sh -c "sleep ${tag}; echo late > /out/late" &) ; sleep 0.1; echo started`]);
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.match(o.stdout.bytes.toString(), /started/);
  assert.ok((o.sideEffects?.processesSpawned.count ?? 0) >= 2, 'the daemon was not seen');
  assert.ok((o.sideEffects?.processesSpawned.outlivedProgram ?? 0) >= 1, `the attempt to outlive the run is reported: ${JSON.stringify(o.sideEffects?.processesSpawned)}`);
  await new Promise((r) => setTimeout(r, 100));
  const alive = readdirSync('/proc').filter((p) => /^\d+$/.test(p)).filter((p) => {
    try {
      return readFileSync(`/proc/${p}/cmdline`, 'utf8').includes(tag);
    } catch {
      return false;
    }
  });
  assert.deepEqual(alive, [], 'a sandbox process survived the run');
});

test('mount is trapped by seccomp: POLICY_ABORTED and reported', async () => {
  const o = await py("import ctypes\nl=ctypes.CDLL(None, use_errno=True)\nprint(l.mount(b'none', b'/tmp', b'tmpfs', 0, None))");
  assert.equal(o.status, 'POLICY_ABORTED', text(o));
  assert.ok(o.sideEffects?.privilegedSyscalls.some((p) => p.name === 'mount' && p.outcome !== 'succeeded'), JSON.stringify(o.sideEffects?.privilegedSyscalls));
});

test('ptrace is trapped by seccomp: POLICY_ABORTED and reported', async () => {
  const o = await py('import ctypes\nl=ctypes.CDLL(None, use_errno=True)\nprint(l.ptrace(16, 1, 0, 0))');
  assert.equal(o.status, 'POLICY_ABORTED', text(o));
  assert.ok(o.sideEffects?.privilegedSyscalls.some((p) => p.name === 'ptrace'), JSON.stringify(o.sideEffects?.privilegedSyscalls));
});

test('opening a device (/dev/sda, /dev/mem, /dev/kmem) fails and is reported', async () => {
  const o = await run(['/bin/sh', '-c', 'for d in /dev/sda /dev/mem /dev/kmem /dev/vda; do cat $d >/dev/null 2>&1 && echo "READ $d"; done; echo done']);
  assert.equal(o.stdout.bytes.toString().trim(), 'done', text(o));
  const seen = (o.sideEffects?.deviceAccess ?? []).map((d) => d.path);
  for (const d of ['/dev/sda', '/dev/mem', '/dev/kmem']) assert.ok(seen.includes(d), `${d} not reported: ${JSON.stringify(seen)}`);
});

test('attack: the host\'s device nodes bound into /dev, and stdin, cannot be changed from the sandbox (touch /dev/null, futimens of stdin, a terminal\'s reads and writes through /dev/tty), under the host tracer and the strace fallback; the devices still work, and each attempt is reported', async () => {
  // bwrap binds the host's own /dev/null, /dev/zero, ... in writable: before the program runs, the
  // host tracer (or, on node's launch, the perl host helper) remounts them read-only and binds
  // /dev/null over /dev/tty (the kernel sets a terminal's times on every read and write, past the
  // mount). stdin is an empty pipe (node's: a socket pair), not a descriptor of the host's /dev/null.
  const nodes = ['/dev/null', '/dev/zero', '/dev/full', '/dev/random', '/dev/urandom'];
  const changed = () => [
    ...nodes.map((p) => [p, String(statSync(p, { bigint: true }).ctimeNs)]),
    ...(existsSync('/dev/tty') ? [['/dev/tty', String(statSync('/dev/tty', { bigint: true }).mtimeNs)]] : []),
  ];
  const before = changed();
  const code = [
    'import os, sys',
    'def tryit(what, f):',
    '  try: f(); print("ok", what)',
    '  except OSError as e: print(e.errno, what)',
    `for p in ${JSON.stringify(nodes)}: tryit(p, lambda p=p: os.utime(p))`,
    'print("stdin", os.readlink("/proc/self/fd/0").split(":")[0])',
    'tryit("stdin", lambda: os.utime("/dev/stdin"))', // the pipe's own times: nothing of the host
    'tryit("fd0", lambda: os.utime(0))',
    'tryit("read", lambda: os.read(os.open("/dev/stdin", os.O_RDONLY), 1) == b"" or os.abort())',
    'tryit("devices", lambda: (open("/dev/null", "w").write("x"), len(open("/dev/urandom", "rb").read(4)) == 4 or os.abort()))',
    // A pseudo-terminal made the controlling terminal of a new session, then used through /dev/tty
    // (a review's finding: the host's /dev/tty took the times of each read and write).
    'm, s = os.openpty()',
    'os.write(m, b"x\\n")',
    'sys.stdout.flush()',
    'if os.fork() == 0:',
    '  os.setsid(); os.close(os.open(os.ttyname(s), os.O_RDWR))',
    '  def tty(): t = os.open("/dev/tty", os.O_RDWR); os.read(t, 10); os.write(t, b"y\\n"); print("tty", os.isatty(t))',
    '  tryit("tty", tty); sys.stdout.flush(); os._exit(0)',
    'os.wait()',
  ].join('\n');
  for (const o of [await py(code), await pyUnderStrace(code)]) {
    const traced = o.host.syscallTracer === 'airlock-tracer';
    // A socket cannot be reopened by name (ENXIO).
    const stdin = traced ? ['stdin pipe', 'ok stdin', 'ok fd0', 'ok read'] : ['stdin socket', 'ok stdin', 'ok fd0', '6 read'];
    assert.deepEqual(o.stdout.bytes.toString().trim().split('\n'), [...nodes.map((p) => `30 ${p}`), ...stdin, 'ok devices', 'tty False', 'ok tty'], `${o.host.syscallTracer}: ${text(o)}`);
    assert.deepEqual(changed(), before, `a host device node's inode changed (${o.host.syscallTracer})`);
    const got = (o.sideEffects?.fileAccess ?? []).filter((a) => a.syscall === 'utimensat').map((a) => [a.path, a.result]);
    assert.deepEqual(got, nodes.map((p) => [p, 'EROFS']), JSON.stringify(o.sideEffects?.fileAccess, null, 1));
  }
});

test('the sandbox runs as an unprivileged host uid with no capabilities', async (t) => {
  const caps = await doctor();
  if (!caps.isRoot) return t.skip('doctor: not root, the sandbox runs as our own uid');
  const o = await run(['/bin/sh', '-c', 'grep -E "^(Uid|CapEff|NoNewPrivs|Seccomp):" /proc/self/status']);
  assert.match(o.stdout.bytes.toString(), /CapEff:\s+0+\n/);
  assert.match(o.stdout.bytes.toString(), /NoNewPrivs:\s+1/);
  assert.match(o.stdout.bytes.toString(), /Seccomp:\s+2/);
  assert.ok(o.host.hostIds === 'own' && o.host.hostUid >= RUN_ID_RANGE.first && o.host.hostUid < RUN_ID_RANGE.first + RUN_ID_RANGE.count, `a uid of the run's own, not the host's shared nobody or sandbox user: ${o.host.hostUid}`);
  assert.match(o.stdout.bytes.toString(), /^Uid:\s+65534\s/m, 'nobody inside');
});
