// `airlock exec [options] -- CMD ARGS...`: a command line run once in the sandbox, the way people
// use `docker run` or `srt`: no request document. The person at the terminal states what the program
// may see, change and reach, and is its approver (recorded as terminal:<user>). The program's output
// comes live; the verdict and what it changed follow. Host folders change only on `airlock promote`
// (or `--promote`, which applies a PROMOTE verdict at once).
import { createHash } from 'node:crypto';
import { lstatSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import type { ActionInput, ActionLimits } from '../action/action.js';
import { actionFromArgv } from '../action/from-argv.js';
import { fuseOnTheWay } from '../base/mountinfo.js';
import { ScopeFs, ScopeFsError } from '../base/scope-fs.js';
import type { Problem } from '../base/problem.js';
import type { SandboxResult } from '../contracts/sandbox-result.js';
import { execute, type ExecuteOutcome, type ExecuteRequest } from '../host/execute.js';
import { loadPolicy } from '../policy/load.js';
import { wayProblem } from '../policy/scopes.js';
import type { Policy } from '../policy/policy.js';
import { sandboxIdle } from '../sandbox/ns/runner.js';
import { openWorkspace, type Workspace } from '../workspace/workspace.js';
import { terminalUser } from './run-file.js';
import { interruptible, watchRun } from './terminal.js';
import { ownedTempDir } from '../base/owner.js';

export interface ExecOptions {
  ro?: string[];
  rw?: string[];
  net?: string[];
  in?: string[];
  cwd?: string;
  timeout?: number;
  memory?: number;
  cpus?: number;
  pids?: number;
  disk?: number;
  files?: number;
  workspace?: string;
  json?: boolean;
  promote?: boolean;
  quiet?: boolean;
}

/** Exit statuses of `airlock exec` besides the program's own (documented in `airlock exec --help`). */
export const EXEC_EXIT = { timeout: 124, refused: 125, blocked: 126, notFound: 127, interrupted: 130 } as const;

const MIB = 1024 * 1024;

/** The policy's maxima, lowered where the command line asks for less (more is refused by the policy). */
function limitsFrom(policy: Policy, o: ExecOptions): ActionLimits {
  const L = policy.limits;
  const wallMs = (o.timeout ?? L.time_sec) * 1000;
  return {
    wallMs,
    cpuMs: Math.round((o.cpus ?? L.cpu_cores) * wallMs),
    memoryBytes: (o.memory ?? L.memory_mb) * MIB,
    diskBytes: (o.disk ?? L.out_mb) * MIB,
    files: o.files ?? L.files,
    pids: o.pids ?? L.pids,
    stdoutBytes: L.stdout_kb * 1024,
    stderrBytes: L.stdout_kb * 1024,
  };
}

/**
 * Copies each --in file into a fresh folder (what the sandbox reads is what was hashed). Each is
 * read as a one-file scope is: through the scope agent, from / down without following a link at
 * any component, with the authority of its folder's owner (a link another user planted, to
 * /etc/shadow say, is refused instead of read as root), and a file of another owner only when
 * anyone may read it.
 */
async function stageInputs(files: string[]): Promise<{ dir: string; inputs: ActionInput[] } | { problems: Problem[] }> {
  const dir = ownedTempDir('exec-in');
  const inputs: ActionInput[] = [];
  const problems: Problem[] = [];
  for (const f of files) {
    const abs = resolve(f);
    const name = basename(abs);
    if (inputs.some((i) => i.name === name)) {
      problems.push({ code: 'EXEC_INPUT', message: `--in ${f}: another input is already named ${name} in /in`, path: '--in' });
      continue;
    }
    // The person chose the file, but a FUSE server that never answers would hold `exec` forever.
    const fuse = fuseOnTheWay(abs);
    if (fuse) {
      problems.push({ code: 'EXEC_INPUT', message: `--in ${f}: ${fuse}; copy it to a local file system first`, path: '--in' });
      continue;
    }
    const read = await readAsItsFolderOwner(abs);
    if ('problem' in read) {
      problems.push({ code: 'EXEC_INPUT', message: `--in ${f}: ${read.problem}`, path: '--in' });
      continue;
    }
    writeFileSync(join(dir, name), read.bytes, { flag: 'wx', mode: 0o600 });
    inputs.push({ name, sha256: createHash('sha256').update(read.bytes).digest('hex') });
  }
  if (problems.length === 0) return { dir, inputs };
  rmSync(dir, { recursive: true, force: true });
  return { problems };
}

/** One regular file's bytes through its own scope agent (see stageInputs), or why it cannot be read. */
async function readAsItsFolderOwner(abs: string): Promise<{ bytes: Buffer } | { problem: string }> {
  let fs: ScopeFs | undefined;
  try {
    fs = await ScopeFs.open(abs, 'file');
    const { stat, bytes } = await fs.read(basename(abs));
    if (stat.type !== 'file') return { problem: `not a regular file (a ${stat.type})` };
    if (stat.uid !== fs.authority.uid && !(stat.mode & 0o004)) {
      return { problem: `it belongs to uid ${stat.uid}, not to its folder's owner (uid ${fs.authority.uid}) whose authority reads it, and is not readable by others` };
    }
    // A hard link's other names may be anywhere (a link to /etc/shadow made in /tmp where hard links
    // are not protected): one the folder's owner did not make readable to all is not read for them.
    if (stat.nlink > 1 && !(stat.mode & 0o004)) return { problem: `it has ${stat.nlink} names (hard links) and is not readable by others: copy it first` };
    return { bytes };
  } catch (e) {
    if (!(e instanceof ScopeFsError)) throw e;
    return { problem: `cannot read it without following a link, as its folder's owner (${e.message})` };
  } finally {
    fs?.close();
  }
}

/** The sandbox's working directory: --cwd, else where the person is when the sandbox shows it, else /tmp. */
function cwdFor(o: ExecOptions, shown: string[], here: string): string | undefined {
  if (o.cwd) return o.cwd;
  return shown.some((p) => here === p || here.startsWith(`${p}/`)) ? here : undefined;
}

function refuse(problems: Problem[], json: boolean | undefined): number {
  if (json) process.stdout.write(JSON.stringify({ refused: true, problems }, null, 2) + '\n');
  for (const p of problems) process.stderr.write(`airlock exec: ${p.code}: ${p.message}${p.path ? ` [${p.path}]` : ''}\n`);
  process.stderr.write('airlock exec: nothing ran\n');
  return EXEC_EXIT.refused;
}

/** What `airlock exec` ran, or why nothing ran. */
export type ExecOutcome = { kind: 'refused'; problems: Problem[] } | Extract<ExecuteOutcome, { kind: 'ran' }>;

/**
 * `airlock exec`'s own path without the terminal: the Action from the command line, then the host
 * core with the person at the terminal as approver. `cwd` stands for the folder the person is in.
 */
export async function execArgv(ws: Workspace, argv: string[], o: ExecOptions, how: Pick<ExecuteRequest, 'signal' | 'onEvent'> & { cwd?: string } = {}): Promise<ExecOutcome> {
  const policy = loadPolicy(ws.policyFile);
  if (!policy.ok) return { kind: 'refused', problems: policy.problems };
  const readOnly = (o.ro ?? []).map((p) => resolve(p));
  const writable = (o.rw ?? []).map((p) => resolve(p));
  // A folder on FUSE, or behind a link (which may lead onto FUSE), is left to the policy's refusal
  // (POLICY_SCOPE_FUSE, POLICY_SCOPE_LINK): a stat there may never return. Only a way walked without
  // following anything is looked at here (a missing folder is not a folder).
  const notDirs = writable.filter((d) => {
    const way = wayProblem(d, '--rw');
    return way === null ? !isDir(d) : way.code === 'POLICY_SCOPE_MISSING';
  }).map((d): Problem => ({ code: 'EXEC_PATH', message: `--rw ${d}: not a folder (a writable place is a folder, seen through a copy-on-write overlay)`, path: '--rw' }));
  if (notDirs.length > 0) return { kind: 'refused', problems: notDirs };
  const staged = await stageInputs(o.in ?? []);
  if ('problems' in staged) return { kind: 'refused', problems: staged.problems };
  try {
    const cwd = cwdFor(o, [...readOnly, ...writable], how.cwd ?? process.cwd());
    const action = actionFromArgv({ argv, readOnly, writable, net: o.net ?? [], inputs: staged.inputs, limits: limitsFrom(policy.value, o), ...(cwd ? { cwd } : {}) });
    if ('problems' in action) return { kind: 'refused', problems: action.problems };
    const done = await execute(ws, { action, door: 'cli', approval: { kind: 'operator', operator: terminalUser(), how: 'terminal' }, inputsDir: staged.dir, ...(how.signal ? { signal: how.signal } : {}), ...(how.onEvent ? { onEvent: how.onEvent } : {}) });
    await sandboxIdle();
    return done;
  } finally {
    rmSync(staged.dir, { recursive: true, force: true });
  }
}

export async function execCommand(argv: string[], o: ExecOptions): Promise<number> {
  const ws = openWorkspace(o.workspace);
  const watch = watchRun({ live: !o.json && !o.quiet, status: !o.json, label: basename(argv[0] ?? '') });
  const stop = interruptible(() => watch.done());
  const done = await execArgv(ws, argv, o, { signal: stop.signal, onEvent: watch.onEvent }).finally(() => {
    watch.done();
    stop.release();
  });
  if (done.kind === 'refused') {
    const notFound = done.problems.some((p) => p.code === 'LANE_RUNTIME_MISSING');
    refuse(done.problems, o.json);
    return notFound ? EXEC_EXIT.notFound : EXEC_EXIT.refused;
  }
  const sr = done.outcome.sandboxResult;
  const promotable = (o.rw ?? []).length > 0 && !o.promote;
  if (o.json) process.stdout.write(JSON.stringify(sr, null, 2) + '\n');
  else process.stderr.write(summary(sr, done.outcome.sandboxResultFile, promotable));
  if (done.record.interrupted) {
    if (!o.json) process.stderr.write('airlock: interrupted: the sandbox was ended before the program; nothing was applied\n');
    return EXEC_EXIT.interrupted;
  }
  if (o.promote && sr.verdict.recommended_action === 'PROMOTE' && hasChanges(sr)) {
    const code = await promoteNow(ws, sr.sandbox_id, o.json);
    if (code !== 0) return code;
  }
  return exitStatus(sr);
}

const isDir = (p: string): boolean => {
  try {
    return lstatSync(p).isDirectory();
  } catch {
    return false;
  }
};

const hasChanges = (sr: SandboxResult): boolean => {
  const d = sr.filesystem_diff;
  return [...d.added, ...d.modified, ...d.deleted].some((e) => !e.path.startsWith('/out/'));
};

/** The program's own status when it ran to its end and was not blocked; else a documented code. */
export function exitStatus(sr: SandboxResult): number {
  const ex = sr.execution;
  if (ex.status === 'TIMEOUT') return EXEC_EXIT.timeout;
  if (sr.verdict.recommended_action === 'BLOCK') return EXEC_EXIT.blocked;
  if (ex.exit_code !== null) return ex.exit_code;
  const signo = ex.signal ? SIGNAL_NUMBERS[ex.signal] : undefined;
  return signo ? 128 + signo : EXEC_EXIT.blocked;
}

const SIGNAL_NUMBERS: Record<string, number> = { SIGHUP: 1, SIGINT: 2, SIGQUIT: 3, SIGILL: 4, SIGTRAP: 5, SIGABRT: 6, SIGBUS: 7, SIGFPE: 8, SIGKILL: 9, SIGUSR1: 10, SIGSEGV: 11, SIGUSR2: 12, SIGPIPE: 13, SIGALRM: 14, SIGTERM: 15, SIGXCPU: 24, SIGXFSZ: 25, SIGSYS: 31 };

const MAX_DIFF_LINES = 20;

/** The verdict and a compact diff, on stderr after the program's own output. */
function summary(sr: SandboxResult, file: string, promotable: boolean): string {
  const ex = sr.execution;
  const end = ex.exit_code !== null ? `exit ${ex.exit_code}` : ex.signal ? `signal ${ex.signal}` : 'no exit status';
  const lines = [`airlock: ${ex.status} (${end}) in ${(ex.wall_time_ms / 1000).toFixed(2)} s, sandbox ${sr.sandbox_id}: verdict ${sr.verdict.recommended_action}`];
  if (sr.verdict.recommended_action !== 'PROMOTE') lines.push(...sr.verdict.reasons.map((r) => `  - ${r}`));
  const d = sr.filesystem_diff;
  const changes = [...d.added.map((e) => `  + ${e.path}`), ...d.modified.map((e) => `  ~ ${e.path}`), ...d.deleted.map((e) => `  - ${e.path}`)];
  if (changes.length > 0) {
    lines.push(`changes (${d.added.length} added, ${d.modified.length} modified, ${d.deleted.length} deleted), not applied:`);
    lines.push(...changes.slice(0, MAX_DIFF_LINES));
    if (changes.length > MAX_DIFF_LINES) lines.push(`  ... and ${changes.length - MAX_DIFF_LINES} more (${file})`);
    if (promotable && sr.verdict.recommended_action === 'PROMOTE' && hasChanges(sr)) lines.push(`apply them: airlock promote ${sr.sandbox_id}`);
  }
  return lines.join('\n') + '\n';
}

async function promoteNow(ws: Workspace, sandboxId: string, json: boolean | undefined): Promise<number> {
  const { promote } = await import('../commit/promote.js');
  const out = await promote(ws, sandboxId, { actor: terminalUser() });
  if (!out.ok) {
    for (const p of out.problems) process.stderr.write(`airlock exec --promote: ${p.code}: ${p.message}\n`);
    return EXEC_EXIT.refused;
  }
  if (!json && out.status === 'promoted') process.stderr.write(`airlock: promoted ${sandboxId}: ${out.journal.ops.length} change(s) applied to the host\n`);
  return 0;
}
