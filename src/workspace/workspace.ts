import { randomBytes } from 'node:crypto';
import { existsSync, mkdirSync, readFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';
import { createOnce } from '../base/create-once.js';
import { DEFAULT_POLICY_YAML } from '../policy/policy.js';
import { unsafeWorkspace } from './safety.js';

/** The folders of an Airlock workspace (see README "The ThreeGate flow"). */
export interface Workspace {
  root: string;
  policyFile: string;
  /** AI-drafted requests waiting for an operator. */
  drafts: string;
  /** Approved requests waiting for the gate service. */
  requestsIn: string;
  /** Requests the service has claimed (atomic rename) and is running. */
  running: string;
  /** Tool Results just written, before their validation as untrusted data. */
  resultsOut: string;
  /** Validated results the AI may read. */
  inbound: string;
  /** Rejected requests and results, each with `<name>.reasons.json` beside it. */
  quarantine: string;
  /** Requests that ran, kept for the record. */
  processed: string;
  /** Content-addressed input store: `inputs/<sha256>`. */
  inputs: string;
  /** One folder per sandbox run: sandbox-result.json, the TS-*.md, out/ and the full streams. */
  runs: string;
  /** Content-addressed pre-images of files a run deleted or overwrote (by sha256). */
  tombstones: string;
  /** Content-addressed new content of files a run added or modified in its scope (what promotion applies). */
  blobs: string;
  /** The embedded store (SQLite): replay ledger and claims. */
  storeFile: string;
  /** The hash-chained audit log. */
  auditFile: string;
  /** Per UTP tool, when the newest signed registration a worker here served was signed (the rollback check's memory). */
  utpRegistrationsFile: string;
}

/** `--workspace DIR`, else `AIRLOCK_HOME`, else `~/.airlock`. */
export function workspaceRoot(explicit?: string): string {
  return resolve(explicit ?? process.env.AIRLOCK_HOME ?? join(homedir(), '.airlock'));
}

export function workspacePaths(explicit?: string): Workspace {
  const root = workspaceRoot(explicit);
  return {
    root,
    policyFile: join(root, 'policy.yaml'),
    drafts: join(root, 'drafts'),
    requestsIn: join(root, 'requests_in'),
    running: join(root, 'running'),
    resultsOut: join(root, 'results_out'),
    inbound: join(root, 'inbound'),
    quarantine: join(root, 'quarantine'),
    processed: join(root, 'processed'),
    inputs: join(root, 'inputs'),
    runs: join(root, 'runs'),
    tombstones: join(root, 'tombstones'),
    blobs: join(root, 'blobs'),
    storeFile: join(root, 'store', 'airlock.db'),
    auditFile: join(root, 'audit', 'audit.jsonl'),
    utpRegistrationsFile: join(root, 'store', 'utp-registrations.json'),
  };
}

/** A workspace Airlock must not use: every door stops with this code and message (nothing is made or read). */
export class WorkspaceError extends Error {
  constructor(
    readonly code: 'WS_NOT_PRIVATE',
    message: string,
  ) {
    super(message);
  }
}

/**
 * Throws WS_NOT_PRIVATE when the workspace at `root` is not this user's alone (safety.ts). For the
 * doors that open no workspace of their own (the UTP store, the audit log): before they read or
 * make anything there.
 */
export function refuseUnsafe(root: string): void {
  const unsafe = unsafeWorkspace(root);
  if (unsafe) {
    throw new WorkspaceError('WS_NOT_PRIVATE', `the workspace ${root} is not this user's alone: ${unsafe}. Airlock acts later on what it keeps there (promotion journals, run records, the policy), so another user must not be able to write it or swap the way to it. Fix the owner or mode named, or give a workspace in a folder of your own (--workspace, AIRLOCK_HOME)`);
  }
}

/** Made once the workspace's first use is over (after its folders and default policy). */
const WORKSPACE_MARKER = '.airlock-workspace';

const FOLDERS: (keyof Workspace)[] = ['drafts', 'requestsIn', 'running', 'resultsOut', 'inbound', 'quarantine', 'processed', 'inputs', 'runs', 'tombstones', 'blobs'];

/**
 * Opens a workspace, creating its folders (and the default policy.yaml) on first use. A workspace
 * in use whose policy.yaml was removed gets none back (every door then refuses: POLICY_MISSING),
 * unless `init` asks for it (`airlock init`). A workspace another user could write, or reach by a
 * way another user could swap, is refused (WorkspaceError WS_NOT_PRIVATE, safety.ts).
 */
export function openWorkspace(explicit?: string, opts: { init?: boolean } = {}): Workspace {
  const ws = workspacePaths(explicit);
  refuseUnsafe(ws.root);
  // First use ends when the marker exists, and the marker is made only after the policy: a process
  // that opens the workspace while another is creating it creates the policy too (one of them wins,
  // both see it whole), instead of taking a half-made workspace for one whose policy was removed.
  // A workspace from before the marker counts as in use once it has an audit log.
  const marker = join(ws.root, WORKSPACE_MARKER);
  const firstUse = !existsSync(marker) && !existsSync(ws.auditFile);
  mkdirSync(ws.root, { recursive: true, mode: 0o700 });
  // Again, now that the whole way exists: a folder of the way that was not made yet when it was
  // checked (in a sticky /tmp, say) may have been made by another user in between, and mkdir
  // -p takes an existing folder as it finds it. Nothing is made in it then.
  refuseUnsafe(ws.root);
  for (const k of FOLDERS) mkdirSync(ws[k], { recursive: true, mode: 0o700 });
  mkdirSync(join(ws.root, 'store'), { recursive: true, mode: 0o700 });
  mkdirSync(join(ws.root, 'audit'), { recursive: true, mode: 0o700 });
  if ((firstUse || opts.init) && !existsSync(ws.policyFile)) createOnce(ws.policyFile, DEFAULT_POLICY_YAML);
  if (firstUse) createOnce(marker, 'an Airlock workspace (its first use is over: a removed policy.yaml is not made again)\n');
  return ws;
}


const WORKSPACE_ID = /^[0-9a-f]{32}$/;

/**
 * This workspace's own id (random, made once, kept in `workspace-id`): an operator's approval of a
 * request names it, so that the approval lets the request run here only, not in another workspace
 * that trusts the same key. Null when the file is damaged (every such approval is then refused).
 */
export function workspaceId(ws: Workspace): string | null {
  const file = join(ws.root, 'workspace-id');
  if (!existsSync(file)) createOnce(file, `${randomBytes(16).toString('hex')}\n`);
  const id = readFileSync(file, 'utf8').trim();
  return WORKSPACE_ID.test(id) ? id : null;
}
