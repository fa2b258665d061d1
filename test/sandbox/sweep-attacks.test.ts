// Attacks on the start-up sweep (sweep.ts) by an unprivileged local user (uid 65534 here): folders
// planted in the shared TMPDIR under a name that says "airlock, dead owner", and a folder swapped for
// a link while root removes a dead owner's base.
import { after, test } from 'node:test';
import assert from 'node:assert/strict';
import { spawn, spawnSync } from 'node:child_process';
import { chmodSync, chownSync, existsSync, mkdirSync, mkdtempSync, readdirSync, rmSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { doctor } from '../../src/sandbox/doctor.js';
import { runNs } from '../../src/sandbox/ns/runner.js';
import { freshOut, LIMITS, text } from './helpers-ns.js';

const sweepUrl = new URL('../../src/sandbox/ns/sweep.js', import.meta.url).href;
// A TMPDIR as /tmp is: world-writable and sticky, reachable by every user (the test runner's own
// TMPDIR is root's 0700 folder, where the attacker could not plant anything).
const sharedTmp = mkdtempSync('/var/tmp/airlock-test-tmp-');
chmodSync(sharedTmp, 0o1777);
after(() => rmSync(sharedTmp, { recursive: true, force: true }));
/** What the next Airlock process does first (stagingBase -> sweepOrphans), as its own root process. */
const sweepAsNextProcess = (): string =>
  spawnSync(process.execPath, ['--input-type=module', '-e', `const { sweepOrphans } = await import(${JSON.stringify(sweepUrl)}); console.log(JSON.stringify(sweepOrphans()));`], {
    encoding: 'utf8',
    env: { ...process.env, TMPDIR: sharedTmp },
  }).stdout;
// `-<pid36>.<start36>-`: pid 1679615 ("zzzz") does not run: a dead owner, as far as the sweep can tell.
const DEAD_TAG = 'zzzz.1';

/** The racer (as uid 65534): fills `<base>/a/b`, waits until a removal starts emptying it, swaps it for a link to `victim`. */
const RACER = [
  'import os, sys, time',
  'base, victim, make_base = sys.argv[1], sys.argv[2], sys.argv[3] == "1"',
  'if make_base: os.mkdir(base)',
  'if make_base: os.mkdir(base + "/a")',
  'a = base + "/a/b"; os.mkdir(a)',
  'N = 20000',
  'for i in range(N): open("%s/f%05d" % (a, i), "w").close()',
  'for n in ("precious1", "precious2", "precious3"): open(a + "/" + n, "w").close()',
  'print("ready", flush=True)',
  'while len(os.listdir(a)) >= N + 3: time.sleep(0.0005)', // the removal has started emptying a/
  'os.rename(a, base + "/a/z"); os.symlink(victim, a)',
  'print("swapped", flush=True)',
].join('\n');

function victimDir(): string {
  const victim = mkdtempSync('/var/tmp/airlock-victim-');
  chmodSync(victim, 0o700);
  for (const n of ['precious1', 'precious2', 'precious3']) writeFileSync(join(victim, n), 'root data');
  return victim;
}

async function race(base: string, victim: string, makeBase: boolean): Promise<{ said: () => string; done: Promise<unknown>; stop: () => void }> {
  const p = spawn('python3', ['-c', RACER, base, victim, makeBase ? '1' : '0'], { uid: 65534, gid: 65534, stdio: ['ignore', 'pipe', 'inherit'] });
  let said = '';
  p.stdout.on('data', (d: Buffer) => (said += d));
  const done = new Promise((r) => p.once('exit', r));
  let exited = false;
  void done.then(() => (exited = true));
  while (!said.includes('ready')) {
    if (exited) throw new Error(`the racer could not set up (said ${JSON.stringify(said)})`);
    await new Promise((r) => setTimeout(r, 20));
  }
  return { said: () => said, done, stop: () => void p.kill('SIGKILL') };
}

test('a folder a local user planted under an Airlock name with a dead owner is left alone by the sweep (never removed as root)', { timeout: 120_000 }, async (t) => {
  if (process.getuid?.() !== 0) return t.skip('needs root');
  const victim = victimDir();
  const base = join(sharedTmp, `airlock-ns-${DEAD_TAG}-evil${process.pid}`);
  // The racer makes the base itself: a folder of uid 65534 under Airlock's name.
  const r = await race(base, victim, true);
  const report = sweepAsNextProcess();
  r.stop(); // it waits for a removal that never comes
  const left = readdirSync(victim);
  const stillThere = existsSync(join(base, 'a', 'b'));
  rmSync(base, { force: true, recursive: true });
  rmSync(victim, { force: true, recursive: true });
  assert.deepEqual(left, ['precious1', 'precious2', 'precious3'], `root's sweep deleted files in ${victim} (sweep said ${report.trim()})`);
  assert.ok(stillThere, 'the planted folder was emptied by root');
  assert.match(report, /left alone, not a folder this user made \(owned by uid 65534/);
});

test('removing a dead owner\'s base never follows a folder swapped for a link while the removal runs (GNU rm, by descriptor)', { timeout: 120_000 }, async (t) => {
  if (process.getuid?.() !== 0) return t.skip('needs root');
  const victim = victimDir();
  // A genuine base of a dead owner (root's, 0711), holding a folder the sandbox's user may write:
  // as a run's /out mount point is, once its tmpfs is gone.
  const base = join(sharedTmp, `airlock-ns-${DEAD_TAG}-gone${process.pid}`);
  mkdirSync(base, { mode: 0o711 });
  chmodSync(base, 0o711);
  mkdirSync(join(base, 'a'), { mode: 0o755 });
  chownSync(join(base, 'a'), 65534, 65534);
  const r = await race(base, victim, false);
  const report = sweepAsNextProcess();
  await Promise.race([r.done, new Promise((res) => setTimeout(res, 5000))]);
  const left = readdirSync(victim);
  rmSync(base, { force: true, recursive: true });
  rmSync(victim, { force: true, recursive: true });
  assert.ok(r.said().includes('swapped'), `the racer did not get to swap (${r.said()}): the test proves nothing`);
  assert.deepEqual(left, ['precious1', 'precious2', 'precious3'], `root's sweep deleted files in ${victim} (sweep said ${report.trim()})`);
});

test('a planted ns-<runId> entry of a live run in a dead owner\'s base does not make a start-up sweep kill that run', { timeout: 60_000 }, async (t) => {
  const caps = await doctor();
  if (!caps.isRoot || !caps.cgroup.usable || caps.blockers.length) return t.skip('needs root and a usable cgroup');
  const running = runNs({ argv: ['/bin/sleep', '3'], outDir: freshOut(), limits: { ...LIMITS, wallMs: 10_000 } });
  // The live run's id is public: its cgroup is listed under <mount>/airlock/ (and its mounts in /proc/self/mountinfo).
  const groups = Object.values(caps.cgroup.bases)[0]!;
  let runId: string | undefined;
  for (let i = 0; i < 200 && !runId; i++) {
    await new Promise((r) => setTimeout(r, 20));
    runId = readdirSync(groups).find((n) => n.startsWith(`ns-`) && n.includes(String(process.pid.toString(36))) && readdirSync(join(groups, n)).includes('cgroup.procs'));
  }
  assert.ok(runId, 'no live run');
  await new Promise((r) => setTimeout(r, 300));
  // The attacker (uid 65534): a "dead owner's" base holding an entry named after the victim run.
  const base = join(sharedTmp, `airlock-ns-${DEAD_TAG}-kill${process.pid}`);
  const planted = spawnSync('python3', ['-c', 'import os,sys; os.mkdir(sys.argv[1]); open(os.path.join(sys.argv[1], sys.argv[2]), "w").close()', base, runId], { uid: 65534, gid: 65534 });
  assert.equal(planted.status, 0, String(planted.stderr));
  sweepAsNextProcess();
  const o = await running;
  rmSync(base, { force: true, recursive: true });
  assert.equal(o.status, 'SUCCESS', `the live run was killed by another process's sweep: ${text(o)}`);
});
