import assert from 'node:assert/strict';
import { repoPath } from '../helpers/paths.js';
import { spawn, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { chmodSync, lstatSync, mkdirSync, mkdtempSync, readdirSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { RunOutcome } from '../../src/pipeline/run.js';
import { runFile } from '../../src/cli/run-file.js';
import type { Workspace } from '../../src/workspace/workspace.js';
import { scopedWorkspace, testScopeDir } from '../helpers/workspace.js';

export const sha = (b: Buffer | string): string => createHash('sha256').update(b).digest('hex');

export function workspace(): Workspace {
  return scopedWorkspace(mkdtempSync(join(tmpdir(), 'airlock-commit-ws-')));
}

/** A real tree outside /tmp (the sandbox has its own /tmp). */
export function tree(files: Record<string, { text: string; mode?: number }>): string {
  const root = testScopeDir('commit-');
  chmodSync(root, 0o777); // the sandbox acts as host nobody: it must be able to change the tree
  for (const [rel, f] of Object.entries(files)) {
    const p = join(root, rel);
    mkdirSync(join(p, '..'), { recursive: true, mode: 0o777 });
    chmodSync(join(p, '..'), 0o777);
    writeFileSync(p, f.text);
    chmodSync(p, f.mode ?? 0o666);
  }
  return root;
}

export { descriptor } from '../helpers/descriptors.js';

/** Runs a descriptor through the library (runFile) and returns the run. */
export async function run(ws: Workspace, d: Record<string, unknown>): Promise<Extract<RunOutcome, { kind: 'ran' }>> {
  const dir = mkdtempSync(join(tmpdir(), 'airlock-desc-'));
  const file = join(dir, 'action.json');
  writeFileSync(file, JSON.stringify(d));
  const out = await runFile(file, { workspace: ws });
  assert.equal(out.kind, 'ran', JSON.stringify(out.kind === 'rejected' ? out.problems : ''));
  return out as Extract<RunOutcome, { kind: 'ran' }>;
}

const entry = repoPath('bin/airlock');

/** The real `airlock` command (promote, confirm, rollback, recover, history) as a process. */
export function cli(args: string[], env: NodeJS.ProcessEnv = {}) {
  const r = spawnSync(entry, args, { encoding: 'utf8', env: { ...process.env, ...env }, timeout: 120_000 });
  return { code: r.status, signal: r.signal, stdout: r.stdout, stderr: r.stderr };
}

export function cliAsync(args: string[], env: NodeJS.ProcessEnv = {}) {
  return spawn(entry, args, { env: { ...process.env, ...env }, stdio: ['ignore', 'pipe', 'pipe'] });
}

/** Every path under root with its type, mode and content hash: two equal snapshots are the same tree. */
export function snapshot(root: string): Record<string, string> {
  const out: Record<string, string> = {};
  const walk = (dir: string, rel: string) => {
    for (const name of readdirSync(dir).sort()) {
      const p = join(dir, name);
      const r = rel ? `${rel}/${name}` : name;
      const st = lstatSync(p);
      const mode = (st.mode & 0o7777).toString(8);
      if (st.isDirectory()) {
        out[r] = `dir ${mode}`;
        walk(p, r);
      } else out[r] = `file ${mode} ${st.uid}:${st.gid} ${sha(readFileSync(p))}`;
    }
  };
  walk(root, '');
  return out;
}

export function auditTypes(ws: Workspace): { type: string; sandbox_id?: string; detail?: Record<string, unknown> }[] {
  let text: string;
  try {
    text = readFileSync(ws.auditFile, 'utf8');
  } catch {
    return [];
  }
  return text.split('\n').filter(Boolean).map((l) => JSON.parse(l) as { type: string; sandbox_id?: string; detail?: Record<string, unknown> });
}

/** The scope owner of the attack tests: an ordinary uid (no passwd entry needed). */
export const OWNER_UID = 4242;

/** A tree owned by OWNER_UID, writable by the sandbox's host user (as a scope must be for it to act). */
export function ownedTree(files: Record<string, string> = {}, prefix = 'atk-'): string {
  const t = testScopeDir(prefix);
  chmodSync(t, 0o777);
  for (const [rel, text] of Object.entries(files)) {
    mkdirSync(join(t, rel, '..'), { recursive: true });
    writeFileSync(join(t, rel), text);
  }
  spawnSync('chown', ['-R', `${OWNER_UID}:${OWNER_UID}`, t]);
  spawnSync('find', [t, '-type', 'd', '-exec', 'chmod', '0777', '{}', '+']);
  spawnSync('find', [t, '-type', 'f', '-exec', 'chmod', '0666', '{}', '+']);
  return t;
}
