import { mkdirSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

/** The folders of an Airlock workspace. Created on first use; see README "Workspace". */
export interface Workspace {
  root: string;
  /** One folder per sandbox run: sandbox-result.json, the TS-*.md, out/ and the full streams. */
  runs: string;
  /** Content-addressed pre-images of files a run deleted or overwrote (by sha256). */
  tombstones: string;
}

/** `--workspace DIR`, else `AIRLOCK_HOME`, else `~/.airlock`. */
export function workspaceRoot(explicit?: string): string {
  return resolve(explicit ?? process.env.AIRLOCK_HOME ?? join(homedir(), '.airlock'));
}

export function openWorkspace(explicit?: string): Workspace {
  const root = workspaceRoot(explicit);
  const ws: Workspace = { root, runs: join(root, 'runs'), tombstones: join(root, 'tombstones') };
  for (const dir of [ws.root, ws.runs, ws.tombstones]) mkdirSync(dir, { recursive: true, mode: 0o700 });
  return ws;
}
