// `airlock show`, `airlock runs` and `airlock confirm` as a person uses them (issue 19, point 5).
import assert from 'node:assert/strict';
import { openAuditLog } from '../../src/audit/index.js';
import { spawn, spawnSync } from 'node:child_process';
import { chownSync, existsSync, mkdtempSync, readdirSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { unifiedDiff } from '../../src/report/text-diff.js';
import { airlock } from '../helpers/cli.js';
import { repoPath } from '../helpers/paths.js';
import { scopedWorkspace, testScopeDir } from '../helpers/workspace.js';
import { dedicatedSandboxUser } from '../helpers/sandbox-user.js';

const root = process.getuid?.() === 0;

/** A folder the sandbox user owns (the program acts as it, README "Ad-hoc runs"). */
function folder(files: Record<string, string>): string {
  const sandboxUser = dedicatedSandboxUser();
  const dir = testScopeDir('show-');
  for (const [name, text] of Object.entries(files)) {
    writeFileSync(join(dir, name), text);
    chownSync(join(dir, name), sandboxUser.uid, sandboxUser.gid);
  }
  chownSync(dir, sandboxUser.uid, sandboxUser.gid);
  return dir;
}

const sandboxIdOf = (stderr: string): string => {
  const id = /sandbox (sbx-[\w-]+)/.exec(stderr)?.[1];
  assert.ok(id, stderr);
  return id;
};

test('airlock show: verdict, reasons, resources, and every change with a unified diff of changed text files; --json; an unknown id exits 2', { skip: !root, timeout: 120_000 }, () => {
  const ws = scopedWorkspace();
  const dir = folder({ 'a.txt': 'one\ntwo\nthree\n', 'gone.txt': 'bye\n', 'esc.txt': 'plain\n' });
  const script = `sed -i s/two/TWO/ a.txt; echo fresh > new.txt; rm gone.txt; printf '\\000\\001bin' > b.bin; printf 'plain\\n\\033]0;pwned\\007\\033[2J\\n' > esc.txt`;
  const r = airlock(['exec', '--workspace', ws.root, '--rw', dir, '--cwd', dir, '--', 'sh', '-c', script]);
  assert.equal(r.code, 0, r.stderr);
  const id = sandboxIdOf(r.stderr);

  const s = airlock(['show', id, '--workspace', ws.root]);
  assert.equal(s.code, 0, s.stderr);
  assert.match(s.stdout, new RegExp(`^sandbox ${id}\\nverdict: +PROMOTE\\n`));
  assert.match(s.stdout, /^command: +sh -c sed -i/m);
  assert.match(s.stdout, /^door: +cli, decided by terminal:/m);
  assert.match(s.stdout, /^reasons:\n {2}- every compliance check passed/m);
  assert.match(s.stdout, /^resources: wall \d+ ms, cpu .* peak memory .* disk written/m);
  assert.match(s.stdout, /^changes \(2 added, 2 modified, 1 deleted\):/m);
  assert.match(s.stdout, /\+ .*\/b\.bin \(\d+ B\) \[binary\]/);
  assert.ok(s.stdout.includes(`--- a${dir}/a.txt\n+++ b${dir}/a.txt\n@@ -1,3 +1,3 @@\n one\n-two\n+TWO\n three\n`), s.stdout);
  assert.ok(s.stdout.includes(`--- /dev/null\n+++ b${dir}/new.txt\n@@ -0,0 +1 @@\n+fresh\n`), s.stdout);
  assert.ok(s.stdout.includes(`--- a${dir}/gone.txt\n+++ /dev/null\n@@ -1 +0,0 @@\n-bye\n`), s.stdout);
  // What the program wrote cannot drive the terminal of the person reading it.
  assert.ok(!s.stdout.includes('\x1b'), 'no raw escape reaches the terminal');
  assert.match(s.stdout, /\+\\x1b\]0;pwned\\x07\\x1b\[2J/);

  const j = airlock(['show', id, '--workspace', ws.root, '--json']);
  assert.equal(j.code, 0);
  const doc = JSON.parse(j.stdout) as { sandbox_id: string; record: { door: string }; sandbox_result: { verdict: { recommended_action: string } }; changes: { change: string; path: string; text_diff: string | null; note?: string }[] };
  assert.equal(doc.sandbox_id, id);
  assert.equal(doc.record.door, 'cli');
  assert.equal(doc.sandbox_result.verdict.recommended_action, 'PROMOTE');
  assert.match(doc.changes.find((c) => c.path.endsWith('/a.txt'))?.text_diff ?? '', /^-two\n\+TWO$/m);
  assert.equal(doc.changes.find((c) => c.path.endsWith('/b.bin'))?.note, 'binary');

  const none = airlock(['show', 'sbx-20000101T000000-0000000000', '--workspace', ws.root]);
  assert.equal(none.code, 2);
  assert.match(none.stderr, /SHOW_NO_RUN/);
  assert.equal(airlock(['show', '../../etc', '--workspace', ws.root]).code, 2, 'not a path');
});

test('airlock runs: recent runs newest first, one line each (time, id, door, verdict, command); --limit; --json', { skip: !root, timeout: 120_000 }, () => {
  const ws = scopedWorkspace();
  assert.equal(airlock(['runs', '--workspace', ws.root]).stdout, 'no runs yet\n');
  const first = sandboxIdOf(airlock(['exec', '--workspace', ws.root, '--', 'echo', 'first']).stderr);
  const second = sandboxIdOf(airlock(['exec', '--workspace', ws.root, '--', 'python3', '-c', "import socket; socket.socket().connect_ex(('192.0.2.1', 80))"]).stderr);
  const all = airlock(['runs', '--workspace', ws.root]);
  assert.equal(all.code, 0);
  const lines = all.stdout.trim().split('\n');
  assert.equal(lines.length, 2);
  assert.match(lines[0] ?? '', new RegExp(`^\\d{4}-\\d\\d-\\d\\dT[\\d:.]+Z  ${second}  cli +BLOCK +python3 -c import socket`));
  assert.match(lines[1] ?? '', new RegExp(`  ${first}  cli +PROMOTE +echo first$`));
  const one = airlock(['runs', '--workspace', ws.root, '--limit', '1', '--json']);
  const doc = JSON.parse(one.stdout) as { runs: { sandbox_id: string; door: string; verdict: string; command: string; started_at: string }[] };
  assert.deepEqual(doc.runs.map((x) => [x.sandbox_id, x.door, x.verdict]), [[second, 'cli', 'BLOCK']]);
  assert.equal(airlock(['runs', '--workspace', ws.root, '--limit', 'x']).code, 2, 'a usage error');
});

test('airlock runs: a run whose process was SIGKILLed shows as KILLED (no result, nothing to promote), a live one as RUNNING', { skip: !root, timeout: 120_000 }, async () => {
  const ws = scopedWorkspace();
  const child = spawn(repoPath('bin', 'airlock'), ['exec', '--workspace', ws.root, '--', 'sleep', '30'], { stdio: 'ignore' });
  const runDir = await new Promise<string>((resolve, reject) => {
    const deadline = Date.now() + 60_000;
    const look = (): void => {
      const names = existsSync(ws.runs) ? readdirSync(ws.runs).filter((n) => existsSync(join(ws.runs, n, 'sandbox-result.json.partial'))) : [];
      if (names[0]) resolve(join(ws.runs, names[0]));
      else if (Date.now() > deadline) reject(new Error('no run folder appeared'));
      else setTimeout(look, 50);
    };
    look();
  });
  const id = runDir.slice(ws.runs.length + 1);
  assert.match(airlock(['runs', '--workspace', ws.root]).stdout, new RegExp(`  ${id}  - +RUNNING +\\(still running\\)`));
  child.kill('SIGKILL');
  await new Promise((r) => child.once('exit', r));
  const doc = JSON.parse(airlock(['runs', '--workspace', ws.root, '--json']).stdout) as { runs: { sandbox_id: string; unfinished?: string; interrupted: boolean }[] };
  assert.deepEqual(doc.runs.map((r) => [r.sandbox_id, r.unfinished, r.interrupted]), [[id, 'killed', true]]);
  assert.match(airlock(['runs', '--workspace', ws.root]).stdout, new RegExp(`  ${id}  - +KILLED\\* +\\(its process died before a result`));
  // The killed run gets its audit record from the next runs on the workspace: two at once, one record.
  const next = await Promise.all([0, 1].map(() => new Promise<number | null>((r) => spawn(repoPath('bin', 'airlock'), ['exec', '--workspace', ws.root, '--', '/bin/true'], { stdio: 'ignore' }).once('exit', r))));
  assert.deepEqual(next, [0, 0]);
  assert.equal(airlock(['exec', '--workspace', ws.root, '--', '/bin/true']).code, 0);
  const killed = openAuditLog(ws.auditFile).show().filter((e) => e.type === 'killed');
  assert.deepEqual(killed.map((e) => [e.sandbox_id, String(e.detail?.owner).split(' ')[0]]), [[id, String(child.pid)]], 'one record, naming the dead process');
  // And what it ran: the line the run wrote under its owner stamp as it started.
  const action = killed[0]?.detail?.action as { action_id?: string; source?: string; lane?: string } | undefined;
  assert.deepEqual([action?.source, action?.lane], ['argv', 'ns'], JSON.stringify(killed[0]?.detail));
  assert.match(action?.action_id ?? '', /\S/);
  assert.equal(airlock(['audit', 'verify', '--workspace', ws.root]).code, 0);
});

/** Runs `airlock ARGS` on a pseudo-terminal (script(1)), typing `input`. */
function onTerminal(args: string[], input: string): { code: number | null; out: string } {
  const cmd = [repoPath('bin/airlock'), ...args].map((a) => `'${a.replace(/'/g, `'\\''`)}'`).join(' ');
  const r = spawnSync('script', ['-qec', cmd, '/dev/null'], { input, encoding: 'utf8', timeout: 60_000 });
  return { code: r.status, out: r.stdout };
}

test('airlock confirm shows the run and its diff, then asks y/N: no terminal and no --yes refuses (exit 2), "n" signs nothing, "y" signs the diff shown', { skip: !root, timeout: 180_000 }, () => {
  const ws = scopedWorkspace();
  const keys = mkdtempSync(join(tmpdir(), 'airlock-keys-'));
  assert.equal(airlock(['keygen', '--operator', 'alice', '--workspace', ws.root, '--key-dir', keys]).code, 0);
  const dir = folder({ 'a.txt': 'old\n' });
  // A non-zero exit needs a person: REQUIRE_CONFIRMATION.
  const r = airlock(['exec', '--workspace', ws.root, '--rw', dir, '--cwd', dir, '--', 'sh', '-c', 'echo new > a.txt; exit 1']);
  assert.equal(r.code, 1, r.stderr);
  assert.match(r.stderr, /verdict REQUIRE_CONFIRMATION/);
  const id = sandboxIdOf(r.stderr);
  const signed = join(ws.runs, id, 'confirmation.json');
  const args = ['confirm', id, '--operator', 'alice', '--key-dir', keys, '--workspace', ws.root];

  const piped = airlock(args);
  assert.equal(piped.code, 2);
  assert.match(piped.stdout, /-old\n\+new\n/, 'the diff is shown before anything is asked');
  assert.match(piped.stderr, /not confirmed: no terminal to ask on; .*--yes/);
  assert.equal(existsSync(signed), false);

  const no = onTerminal(args, 'n\n');
  assert.equal(no.code, 2, no.out);
  assert.match(no.out, /verdict: +REQUIRE_CONFIRMATION[\s\S]*-old\r?\n\+new\r?\n[\s\S]*Confirm this diff and sign it as alice\? \[y\/N\]/);
  assert.match(no.out, /not confirmed: nothing signed/);
  assert.equal(existsSync(signed), false);

  const yes = onTerminal(args, 'y\n');
  assert.equal(yes.code, 0, yes.out);
  assert.match(yes.out, /confirmed sbx-[\w-]+ as alice: 0 added, 1 modified, 0 deleted/);
  assert.equal(existsSync(signed), true);

  // A verdict that cannot be confirmed is refused at once, without asking.
  const ok = sandboxIdOf(airlock(['exec', '--workspace', ws.root, '--', 'true']).stderr);
  const refused = airlock(['confirm', ok, '--operator', 'alice', '--key-dir', keys, '--workspace', ws.root]);
  assert.equal(refused.code, 2);
  assert.match(refused.stderr, /CONFIRM_VERDICT/);
});

test('unified diffs: hunks with three lines of context, as diff -u writes them', () => {
  const before = Array.from({ length: 12 }, (_, i) => `${i + 1}`).join('\n') + '\n';
  const after = before.replace('3\n', 'X\n').replace('12\n', 'Y\n');
  assert.equal(unifiedDiff(before, after, { a: 'a/f', b: 'b/f' }), '--- a/f\n+++ b/f\n@@ -1,6 +1,6 @@\n 1\n 2\n-3\n+X\n 4\n 5\n 6\n@@ -9,4 +9,4 @@\n 9\n 10\n 11\n-12\n+Y\n');
  assert.equal(unifiedDiff('same\n', 'same\n', { a: 'a', b: 'b' }), '');
  assert.equal(unifiedDiff('a\n', 'a', { a: 'a', b: 'b' }), '--- a\n+++ b\n@@ -1 +1 @@\n-a\n+a\n\\ No newline at end of file\n');
});

test('unified diffs agree with patch(1) on random texts', { skip: spawnSync('patch', ['--version']).status !== 0 }, () => {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-diff-'));
  let seed = 7;
  const rnd = () => ((seed = (seed * 1103515245 + 12345) % 2 ** 31) / 2 ** 31);
  const text = (n: number) => Array.from({ length: n }, () => 'abcde'[Math.floor(rnd() * 5)]).join('\n') + (rnd() < 0.2 ? '' : '\n');
  for (let i = 0; i < 150; i++) {
    const a = rnd() < 0.1 ? '' : text(Math.floor(rnd() * 30));
    const b = rnd() < 0.1 ? '' : text(Math.floor(rnd() * 30));
    const d = unifiedDiff(a, b, { a: 'a', b: 'b' });
    if (d === '') {
      assert.equal(a, b);
      continue;
    }
    writeFileSync(join(dir, 'a'), a);
    writeFileSync(join(dir, 'p'), d ?? '');
    const r = spawnSync('patch', ['-s', '-o', join(dir, 'out'), join(dir, 'a'), join(dir, 'p')], { encoding: 'utf8' });
    assert.equal(r.status, 0, r.stderr + r.stdout);
    assert.equal(spawnSync('cat', [join(dir, 'out')], { encoding: 'utf8' }).stdout, b, JSON.stringify({ a, b, d }));
  }
});
