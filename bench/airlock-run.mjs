// One full Airlock run as bench/sandbox.mjs and bench/peers.mjs time it: validate the document,
// translate, sandbox, observe, judge, render (its files written to the workspace). A run's folder stays
// until the bench ends (removeWorkspace): deleting results is not part of a run, and on an ext4
// without a journal every deletion makes the next new inodes dearer for minutes (src/workspace/disk.ts),
// which a service, deleting nothing per run, never pays.
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { checkText } from '../dist/src/contracts/index.js';
import { actionFromDescriptor } from '../dist/src/action/from-action-descriptor.js';
import { actionFromToolRequest } from '../dist/src/action/from-tool-request.js';
import { actionFromArgv } from '../dist/src/action/from-argv.js';
import { runAction } from '../dist/src/pipeline/run.js';
import { openWorkspace } from '../dist/src/workspace/workspace.js';
import { descriptor, montyRequest } from './sandbox-fixtures.mjs';

export const ws = openWorkspace(mkdtempSync(join(tmpdir(), 'airlock-bench-')));
const inputsDir = mkdtempSync(join(tmpdir(), 'airlock-bench-in-'));
export const removeWorkspace = () => {
  rmSync(ws.root, { recursive: true, force: true });
  rmSync(inputsDir, { recursive: true, force: true });
};
// A bench that stops on an error leaves no workspace behind either.
process.on('exit', removeWorkspace);

async function airlockRun(name, text, from) {
  const t0 = performance.now();
  const checked = checkText(name, text);
  if (checked.problems.length) throw new Error(JSON.stringify(checked.problems));
  const action = from(checked.value);
  const validateMs = performance.now() - t0;
  const r = await runAction(action, { workspace: ws, inputsDir, scopeRoots: ['/var/tmp/airlock-bench'] });
  if (r.kind !== 'ran') throw new Error(JSON.stringify(r.problems));
  return Object.assign(r, { validateMs });
}
/** A full gated run of a COMMAND_EXECUTION descriptor (default: /bin/true with one declared scope). */
export const nsRun = (text = descriptor) => airlockRun('bench.json', text, actionFromDescriptor);
/** A full gated run of the Tool Request whose program is `1 + 1`, in the Monty lane. */
export const montyRun = (text = montyRequest) => airlockRun('TR-20261122-000000Z-bench-monty.md', text, actionFromToolRequest);

/** The limits of `execRun`'s actions (one shape: after the first run, sandboxes of it can wait). */
const EXEC_LIMITS = { wallMs: 5000, cpuMs: 1000, memoryBytes: 64 << 20, diskBytes: 1 << 20, files: 1000, pids: 64, stdoutBytes: 1 << 20, stderrBytes: 1 << 20 };
/** A full gated run of `argv` as `airlock exec -- argv` makes it (no scope, no network: the pool's shape). */
export async function execRun(argv) {
  const action = actionFromArgv({ argv, readOnly: [], writable: [], net: [], inputs: [], limits: EXEC_LIMITS });
  if ('problems' in action) throw new Error(JSON.stringify(action.problems));
  const r = await runAction(action, { workspace: ws, inputsDir, scopeRoots: [] });
  if (r.kind !== 'ran') throw new Error(JSON.stringify(r.problems));
  return r;
}

/** A full gated run of a Tool Request (ns lane unless its backend is monty). */
export const trRun = (text) => airlockRun('TR-20261122-000000Z-bench-monty.md', text, actionFromToolRequest);

export { bareArgs } from './bare-bwrap.mjs';

/** Where a run's time went, one row per phase (ms); an ns run's lane phases come from its runner. */
export function phasesOf(r) {
  const p = r.timings;
  const t = r.observation.timings;
  if (!t) return { validate: r.validateMs, 'before launch': p.beforeMs, lane: p.laneMs, judge: p.judgeMs, render: p.renderMs, 'record+screen': p.recordMs + p.screenMs };
  const runner = t.stagingMs + t.launchMs + t.programMs + t.observeMs + t.diffMs;
  return {
    validate: r.validateMs,
    'before launch': p.beforeMs + (p.laneMs - runner) + t.stagingMs,
    launch: t.launchMs,
    program: t.programMs,
    observation: t.observeMs,
    diff: t.diffMs,
    judge: p.judgeMs,
    render: p.renderMs,
    'record+screen': p.recordMs + p.screenMs,
  };
}
