// Runs every compiled test file with node's own test runner (Node 20 has no --test glob).
// Every temporary file of the run goes under one directory (TMPDIR), removed at the end: tests do
// not litter the machine's /tmp.
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

const root = new URL('../dist/test/', import.meta.url).pathname;
const repo = new URL('../', import.meta.url).pathname;
const args = process.argv.slice(2);
// `npm test` is `node scripts/test.mjs --full`: build and lint first, each step said with its time,
// so the two silent minutes before the first test result say what they are.
const full = args.includes('--full');
const only = args.filter((a) => a !== '--full');
const t0 = Date.now();
const secs = (t) => `${((Date.now() - t) / 1000).toFixed(1)} s`;
function step(n, what, cmd, cmdArgs) {
  console.log(`test: [${n}/3] ${what}`);
  const t = Date.now();
  const r = spawnSync(cmd, cmdArgs, { stdio: 'inherit', cwd: repo });
  if (r.status !== 0) {
    console.error(`test: [${n}/3] ${what} failed (exit ${r.status ?? r.signal}) after ${secs(t)}`);
    process.exit(r.status || 1);
  }
  console.log(`test: [${n}/3] done in ${secs(t)}`);
}
if (full) {
  step(1, 'build: tsc, the CLI bundle, the native helpers', 'npm', ['run', '--silent', 'build']);
  step(2, 'lint: eslint .', process.execPath, [new URL('../node_modules/eslint/bin/eslint.js', import.meta.url).pathname, '.']);
}
const files = [];
const walk = (dir) => {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    // Matched inside the repository (dist/test/...): a checkout at /work/wt-commit must not match `commit` everywhere.
    else if (name.endsWith('.test.js') && (only.length === 0 || only.some((o) => p.slice(repo.length).includes(o)))) files.push(p);
  }
};
walk(root);
if (files.length === 0) {
  console.error('no test files found under dist/test (did the build run?)');
  process.exit(1);
}
const tmp = mkdtempSync(join(tmpdir(), 'airlock-test-run-'));
chmodSync(tmp, 0o755); // the sandbox's host uid (nobody) must reach the staging dirs below it
// The real trees tests act on as scopes (test/helpers/workspace.ts), outside /tmp: the sandbox has its own.
const scopes = mkdtempSync('/var/tmp/airlock-test-scopes-');
chmodSync(scopes, 0o755);
const folders = new Set(files.map((f) => f.slice(root.length).split('/')[0]));
console.log(`test: ${full ? '[3/3] ' : ''}${files.length} test file${files.length === 1 ? '' : 's'} in ${folders.size} folder${folders.size === 1 ? '' : 's'} (${[...folders].join(', ')})`);
const r = spawnSync(process.execPath, ['--enable-source-maps', '--test', '--test-reporter=spec', ...files], { stdio: 'inherit', env: { ...process.env, TMPDIR: tmp, AIRLOCK_TEST_SCOPE_ROOT: scopes } });

// The test processes are gone: sweep what their sandboxes left mounted (staging tmpfs, overlays,
// cgroups), then remove the directory, unless something is still mounted below it (then say so).
process.env.TMPDIR = tmp;
try {
  const { mountsBelow, sweepOrphans } = await import('../dist/src/sandbox/ns/sweep.js');
  for (const e of sweepOrphans().errors) console.error(`test cleanup: ${e}`);
  for (const dir of [tmp, scopes]) {
    const mounted = mountsBelow(dir);
    if (mounted.length) console.error(`test cleanup: still mounted, ${dir} kept: ${mounted.join(', ')}`);
    else rmSync(dir, { recursive: true, force: true });
  }
} catch (e) {
  console.error(`test cleanup failed, ${tmp} and ${scopes} kept: ${e.message}`); // the tests' own verdict stands
}
console.log(`test: ${r.status === 0 ? 'passed' : 'FAILED'} in ${secs(t0)}${full ? ' (build, lint and tests)' : ''}`);
process.exit(r.status ?? 1);
