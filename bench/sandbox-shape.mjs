// The sandbox's own shape, without Airlock's machinery: bwrap started from Node with a full run's
// arguments (its namespaces, root, /in, /out, /tmp, /dev/shm, one scope bound, the read-only root,
// the environment), but no host tracer, cgroup, seccomp filter, rlimits, staging mounts or run
// record. Its ratio to bare bwrap is the part of a full run's ratio that the sandbox itself costs.
import { spawn } from 'node:child_process';
import { mkdirSync, mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { doctor } from '../dist/src/sandbox/doctor.js';
import { rootPlan } from '../dist/src/sandbox/rootfs.js';
import { namespaceArgs, READ_ONLY_ROOT } from '../dist/src/sandbox/ns/bwrap-args.js';
import { SCOPE_DIR } from './sandbox-fixtures.mjs';

/** A function that runs /bin/true in bwrap with a full run's arguments, and a cleanup. */
export async function runShape() {
  const caps = await doctor();
  const plan = await rootPlan(caps);
  const dir = mkdtempSync(join(tmpdir(), 'airlock-bench-shape-'));
  for (const d of ['in', 'out', 'tmp', 'shm']) mkdirSync(join(dir, d));
  const args = [
    ...namespaceArgs(caps.bwrap),
    ...plan.args,
    '--bind', join(dir, 'tmp'), '/tmp', '--bind', join(dir, 'shm'), '/dev/shm',
    '--ro-bind', join(dir, 'in'), '/in', '--bind', join(dir, 'out'), '/out',
    '--bind', SCOPE_DIR, SCOPE_DIR,
    ...READ_ONLY_ROOT, '--clearenv', '--setenv', 'PATH', plan.path.join(':'), '--setenv', 'HOME', '/tmp', '--chdir', '/tmp',
    '--', '/bin/true',
  ];
  const run = () =>
    new Promise((resolve, reject) => {
      const p = spawn(caps.bwrap.path, args, { stdio: 'ignore' });
      p.once('error', reject);
      p.once('exit', (code) => (code === 0 ? resolve() : reject(new Error(`bwrap with a full run's arguments: exit ${code}`))));
    });
  return { run, close: () => rmSync(dir, { recursive: true, force: true }) };
}
