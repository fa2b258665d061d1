// Runs every compiled test file with node's own test runner (Node 20 has no --test glob).
// Every temporary file of the run goes under one directory (TMPDIR), removed at the end: tests do
// not litter the machine's /tmp.
import { chmodSync, mkdtempSync, readdirSync, rmSync, statSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { spawnSync } from 'node:child_process';

const root = new URL('../dist/test/', import.meta.url).pathname;
const only = process.argv.slice(2);
const files = [];
const walk = (dir) => {
  for (const name of readdirSync(dir).sort()) {
    const p = join(dir, name);
    if (statSync(p).isDirectory()) walk(p);
    else if (name.endsWith('.test.js') && (only.length === 0 || only.some((o) => p.includes(o)))) files.push(p);
  }
};
walk(root);
if (files.length === 0) {
  console.error('no test files found under dist/test (did the build run?)');
  process.exit(1);
}
const tmp = mkdtempSync(join(tmpdir(), 'airlock-test-run-'));
chmodSync(tmp, 0o755); // the sandbox's host uid (nobody) must reach the staging dirs below it
const r = spawnSync(process.execPath, ['--enable-source-maps', '--test', '--test-reporter=spec', ...files], { stdio: 'inherit', env: { ...process.env, TMPDIR: tmp } });

// The test processes are gone: sweep what their sandboxes left mounted (staging tmpfs, overlays,
// cgroups), then remove the directory, unless something is still mounted below it (then say so).
process.env.TMPDIR = tmp;
try {
  const { mountsBelow, sweepOrphans } = await import('../dist/src/sandbox/ns/sweep.js');
  for (const e of sweepOrphans().errors) console.error(`test cleanup: ${e}`);
  const mounted = mountsBelow(tmp);
  if (mounted.length) console.error(`test cleanup: still mounted, ${tmp} kept: ${mounted.join(', ')}`);
  else rmSync(tmp, { recursive: true, force: true });
} catch (e) {
  console.error(`test cleanup failed, ${tmp} kept: ${e.message}`); // the tests' own verdict stands
}
process.exit(r.status ?? 1);
