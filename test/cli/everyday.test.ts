// Everyday programs run honestly through `airlock exec` (issue 19, point 3): ordinary commands a
// person runs every day must PROMOTE, with the probes glibc and runtimes make on their own (nscd on a
// host without it, locale files, /proc/self, a loopback bind to port 0) neither blocked nor reported.
// And the hostile cases next to them stay blocked and reported.
import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, readdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';
import { join } from 'node:path';
import { test } from 'node:test';
import { execArgv, exitStatus, type ExecOptions } from '../../src/cli/exec.js';
import type { SandboxResult } from '../../src/contracts/sandbox-result.js';
import type { Workspace } from '../../src/workspace/workspace.js';
import { repoPath } from '../helpers/paths.js';
import { scopedWorkspace, testScopeDir } from '../helpers/workspace.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';

const root = process.getuid?.() === 0;

interface Outcome {
  code: number | null;
  verdict: string;
  reasons: string[];
  stdout: string;
  network: unknown[];
  files: unknown[];
  changed: string[];
}

function outcomeOf(sr: SandboxResult, code: number | null): Outcome {
  const d = sr.filesystem_diff;
  return {
    code,
    verdict: sr.verdict.recommended_action,
    reasons: sr.verdict.reasons,
    stdout: sr.outputs.stdout.text ?? '',
    network: sr.side_effects.network_attempts ?? [],
    files: sr.side_effects.file_access_attempts ?? [],
    changed: [...d.added, ...d.modified, ...d.deleted].map((e) => e.path),
  };
}

/** The real `airlock exec --json`, as a person runs it, from the folder `cwd`. */
function execCli(ws: string, args: string[], cwd: string): Outcome {
  const r = spawnSync(repoPath('bin/airlock'), ['exec', '--workspace', ws, '--json', ...args], { cwd, encoding: 'utf8', timeout: 120_000 });
  try {
    return outcomeOf(JSON.parse(r.stdout) as SandboxResult, r.status);
  } catch {
    throw new Error(`airlock exec ${args.join(' ')}: no Sandbox Result (exit ${r.status}): ${r.stdout}${r.stderr}`);
  }
}

/** `airlock exec`'s own path in this process (execArgv, what the command calls): a process start and
 *  the sandbox's first-run set-up are paid once for the whole corpus, not once per command. */
async function execHere(ws: Workspace, o: ExecOptions, argv: string[], cwd: string): Promise<Outcome> {
  const done = await execArgv(ws, argv, o, { cwd });
  if (done.kind === 'refused') throw new Error(`airlock exec ${argv.join(' ')} refused: ${JSON.stringify(done.problems)}`);
  return outcomeOf(done.outcome.sandboxResult, exitStatus(done.outcome.sandboxResult));
}

const git = (dir: string, ...args: string[]): void => {
  const r = spawnSync('git', ['-c', 'user.email=t@example.org', '-c', 'user.name=t', ...args], { cwd: dir, encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`git ${args.join(' ')}: ${r.stderr}`);
};

/** A small project: data files, a C program with a Makefile, a git history with an uncommitted change, a tarball. */
function project(): string {
  const dir = testScopeDir('everyday-');
  chmodSync(dir, 0o755);
  writeFileSync(join(dir, 'data.txt'), 'banana 3\napple 1\ncherry 2\napple 1\n');
  writeFileSync(join(dir, 'data.json'), '{"a": [1, 2], "b": "x"}\n');
  writeFileSync(join(dir, 'hello.c'), '#include <stdio.h>\nint main(void) { printf("hello from c\\n"); return 0; }\n');
  writeFileSync(join(dir, 'Makefile'), 'hello: hello.o\n\tcc -o hello hello.o\nhello.o: hello.c\n\tcc -c hello.c\n');
  git(dir, 'init', '-q', '-b', 'main', '.');
  git(dir, 'add', '.');
  git(dir, 'commit', '-qm', 'first');
  writeFileSync(join(dir, 'data.txt'), 'banana 3\napple 1\ncherry 2\napple 1\npear 4\n');
  git(dir, 'commit', '-qam', 'second');
  writeFileSync(join(dir, 'data.txt'), 'banana 3\napple 1\ncherry 2\napple 1\npear 4\nplum 5\n');
  const tar = spawnSync('tar', ['czf', 'archive.tgz', 'data.txt', 'data.json'], { cwd: dir });
  assert.equal(tar.status, 0);
  // As root, the program acts as the unprivileged sandbox user (README, "Ad-hoc runs"): the project is
  // that user's own, as a person's project is theirs, so that git can write its .git.
  const sandboxUser = dedicatedSandboxUser();
  const own = (p: string): void => {
    chownSync(p, sandboxUser.uid, sandboxUser.gid);
    if (statSync(p).isDirectory()) for (const n of readdirSync(p)) own(join(p, n));
  };
  own(dir);
  return dir;
}

/** Commands that only read the project (--ro): [argv, what their output shows]. */
const READ_ONLY: [string[], RegExp][] = [
  [['id'], /^uid=\d+/],
  [['whoami'], /\w/],
  [['ls', '-la'], /data\.txt/],
  [['ls', '-l', '/usr/bin/env'], /env/],
  [['date'], /\d{4}/],
  [['date', '-u', '+%Y-%m-%d'], /^\d{4}-\d\d-\d\d$/m],
  [['env'], /PATH=/],
  [['locale'], /LANG|LC_/],
  [['uname', '-a'], /Linux/],
  [['hostname'], /\w/],
  [['pwd'], /everyday-/],
  [['cat', 'data.txt'], /plum/],
  [['wc', '-l', 'data.txt'], /^6 data\.txt/],
  [['sort', 'data.txt'], /^apple 1\napple 1\nbanana/],
  [['sh', '-c', 'sort data.txt | uniq -c'], /2 apple 1/],
  [['sha256sum', 'data.txt'], /^[0-9a-f]{64} {2}data\.txt/],
  [['md5sum', 'data.txt'], /^[0-9a-f]{32}/],
  [['grep', '-n', 'apple', 'data.txt'], /^2:apple/],
  [['find', '.', '-name', '*.c'], /\.\/hello\.c/],
  [['awk', '{ s += $2 } END { print s }', 'data.txt'], /^16$/m],
  [['sed', '-n', '2p', 'data.txt'], /^apple 1$/m],
  [['stat', 'data.txt'], /Size: \d+/],
  [['du', '-sh', '.'], /\d/],
  [['df', '-h', '/'], /Filesystem/],
  [['ps', 'aux'], /PID/],
  [['nproc'], /^\d+$/m],
  [['cat', '/proc/self/status'], /^Name:\s+cat/m],
  [['ls', '-la', '/proc/self/'], /cwd ->/],
  [['git', 'status'], /modified: +data\.txt/],
  [['git', 'log', '--oneline'], /second\n[0-9a-f]+ first/],
  [['git', 'diff'], /\+plum 5/],
  [['git', 'show', '--stat', 'HEAD'], /data\.txt \| 1 \+/],
  [['python3', '-c', 'import json; print(json.dumps({"a": 1}))'], /^\{"a": 1\}$/m],
  [['python3', '-c', 'import getpass, locale; print(getpass.getuser(), locale.getpreferredencoding())'], /\w/],
  [['node', '-e', 'console.log(require("os").userInfo().username, [3, 1, 2].sort().join(","))'], /1,2,3/],
  [['pip', 'list'], /^pip /m],
  [['perl', '-e', 'print "perl ok\\n"'], /^perl ok$/m],
  [['jq', '.a[1]', 'data.json'], /^2$/m],
  [['tar', 'tzf', 'archive.tgz'], /data\.json/],
  [['sh', '-c', 'tar czf /tmp/x.tgz data.txt && tar tzf /tmp/x.tgz'], /^data\.txt$/m],
  [['sh', '-c', 'gzip -c data.txt | gunzip | tail -1'], /^plum 5$/m],
  [['sh', '-c', 'xz -c data.txt | xz -d | head -1'], /^banana 3$/m],
  [['base64', 'data.json'], /^eyJh/],
  [['file', 'hello.c'], /C source/],
  [['which', 'sh'], /\/sh$/m],
  [['sh', '-c', 'seq 1 10 | paste -sd+ | bc'], /^55$/m],
  [['bash', '-c', 'echo "bash $BASH_VERSION"'], /^bash \d/],
  [['sh', '-c', 'ulimit -a'], /\w/],
  [['sh', '-c', 'gcc -o /tmp/hello hello.c && /tmp/hello'], /^hello from c$/m],
  [['make', '-n'], /cc -c hello\.c/],
];

/** Commands that change the project (--rw): [argv, what must show in the diff]. */
const WRITABLE: [string[], RegExp][] = [
  [['make'], /\/hello$/m],
  [['gcc', '-o', 'hello2', 'hello.c'], /\/hello2$/m],
  [['sort', '-o', 'sorted.txt', 'data.txt'], /\/sorted\.txt$/m],
  [['gzip', '-k', 'data.json'], /\/data\.json\.gz$/m],
  [['sed', '-i', 's/apple/APPLE/', 'data.txt'], /\/data\.txt$/m],
  [['git', '-c', 'user.email=t@example.org', '-c', 'user.name=t', 'commit', '-qam', 'third'], /\/\.git\/refs\/heads\/main$/m],
  [['python3', '-c', 'open("py.txt", "w").write("x")'], /\/py\.txt$/m],
  [['sh', '-c', 'mkdir sub && touch sub/f && rm data.json'], /\/sub\/f$/m],
];

/** Run through the real binary too (a process each): the CLI adds nothing that blocks. */
const THROUGH_CLI = new Set(['id', 'ls -la', 'git status', 'pip list', 'make']);

test(`everyday programs: ${READ_ONLY.length + WRITABLE.length} ordinary commands through airlock exec all PROMOTE, with no network or file access attempt reported`, { skip: !root, timeout: 600_000 }, async () => {
  const ws = scopedWorkspace();
  const dir = project();
  const failed: string[] = [];
  const check = (name: string, o: Outcome, shows: RegExp, what: string) => {
    const problems = [
      o.verdict !== 'PROMOTE' && `verdict ${o.verdict}: ${o.reasons.join('; ')}`,
      o.code !== 0 && `exit ${o.code}`,
      o.network.length > 0 && `network attempts reported: ${JSON.stringify(o.network)}`,
      o.files.length > 0 && `file access attempts reported: ${JSON.stringify(o.files)}`,
      !shows.test(what) && `expected ${shows} in ${JSON.stringify(what.slice(0, 400))}`,
    ].filter(Boolean);
    if (problems.length > 0) failed.push(`${name}: ${problems.join('; ')}`);
  };
  // Sequential: each run is a whole sandbox, and the machine is small.
  for (const [flag, list] of [['--ro', READ_ONLY], ['--rw', WRITABLE]] as const) {
    for (const [argv, shows] of list) {
      const o = await execHere(ws, flag === '--ro' ? { ro: [dir] } : { rw: [dir] }, argv, dir);
      const what = (x: Outcome) => (flag === '--ro' ? x.stdout : x.changed.join('\n'));
      check(`${flag} ${argv.join(' ')}`, o, shows, what(o));
      if (THROUGH_CLI.has(argv.join(' '))) {
        const cli = execCli(ws.root, [flag, dir, '--', ...argv], dir);
        check(`airlock exec ${flag} ${argv.join(' ')}`, cli, shows, what(cli));
      }
    }
  }
  assert.deepEqual(failed, [], `${failed.length} of ${READ_ONLY.length + WRITABLE.length} did not pass:\n${failed.join('\n')}`);
  assert.ok(!existsSync(join(dir, 'hello')) && readFileSync(join(dir, 'data.txt'), 'utf8').includes('apple'), 'nothing was applied to the real folder');
});

/** A host service listening on a unix socket outside the sandbox, and one on loopback TCP. */
async function services(dir: string): Promise<{ sock: string; port: number; close: () => Promise<void> }> {
  const listen = (s: Server, at: string | number) => new Promise<void>((res) => (typeof at === 'string' ? s.listen(at, res) : s.listen(at, '127.0.0.1', res)));
  const unix = createServer((c) => c.end('secret\n'));
  const tcp = createServer((c) => c.end('secret\n'));
  const sock = join(dir, 'host-service.sock');
  await listen(unix, sock);
  await listen(tcp, 0);
  const port = (tcp.address() as { port: number }).port;
  const close = async () => {
    await new Promise((r) => unix.close(r));
    await new Promise((r) => tcp.close(r));
  };
  return { sock, port, close };
}

test('the hostile cases beside them stay blocked and reported: a unix socket of a host service, a TCP connect, a bind to a fixed port, a connect to a path that exists on the host', { skip: !root, timeout: 300_000 }, async () => {
  const ws = scopedWorkspace();
  const hostDir = testScopeDir('host-svc-');
  const svc = await services(hostDir);
  try {
    const py = (code: string): Outcome => execCli(ws.root, ['--', 'python3', '-c', code], '/');
    // A host service's unix socket: not in the sandbox (ENOENT there), but it exists on the host.
    const unix = py(`import socket\ns = socket.socket(socket.AF_UNIX)\ntry:\n s.connect(${JSON.stringify(svc.sock)}); print('CONNECTED', s.recv(10))\nexcept OSError as e: print('blocked', e.errno)`);
    assert.match(unix.stdout, /^blocked/);
    assert.equal(unix.verdict, 'BLOCK', unix.reasons.join('; '));
    assert.equal(unix.code, 126);
    assert.ok(unix.reasons.some((r) => r.includes(svc.sock)), unix.reasons.join('; '));
    assert.ok(JSON.stringify(unix.network).includes(svc.sock), JSON.stringify(unix.network));

    // The same glibc-style probe (a path nothing exists at) is not: it is what `id` does.
    const nowhere = py(`import socket\ns = socket.socket(socket.AF_UNIX)\ntry: s.connect(${JSON.stringify(join(hostDir, 'no-such.sock'))})\nexcept OSError as e: print('absent', e.errno)`);
    assert.equal(nowhere.verdict, 'PROMOTE', nowhere.reasons.join('; '));
    assert.deepEqual(nowhere.network, []);

    // A TCP connect to the host's loopback service (the sandbox has its own empty network).
    const tcp = py(`import socket\ntry:\n socket.create_connection(('127.0.0.1', ${svc.port}), timeout=2); print('CONNECTED')\nexcept OSError as e: print('blocked', e.errno)`);
    assert.match(tcp.stdout, /^blocked/);
    assert.equal(tcp.verdict, 'BLOCK');
    assert.ok(tcp.reasons.some((r) => r.includes(`127.0.0.1:${svc.port}`)), tcp.reasons.join('; '));

    // A server on a fixed port: not a probe, reported.
    const bind = py("import socket\ns = socket.socket()\ns.bind(('127.0.0.1', 8765)); s.listen(1); print('listening')");
    assert.equal(bind.verdict, 'BLOCK', bind.reasons.join('; '));
    assert.ok(bind.reasons.some((r) => r.includes('127.0.0.1:8765')), bind.reasons.join('; '));

    // An abstract unix socket (the host's are in another network namespace): reported.
    const abstract = py("import socket\ns = socket.socket(socket.AF_UNIX)\ntry: s.connect('\\0airlock-test-abstract')\nexcept OSError as e: print('blocked', e.errno)");
    assert.equal(abstract.verdict, 'BLOCK', abstract.reasons.join('; '));
  } finally {
    await svc.close();
  }
});
