import { literalPrefix, pathSegments } from '../base/globs.js';

/**
 * The one internal model every front door (TR-*.md, Action Descriptor JSON, UTP command) is
 * translated into. The sandbox, the judge and the renderers only ever see an Action.
 */
export type Lane = 'ns' | 'monty';

export type RiskLevel = 'LOW' | 'MEDIUM' | 'HIGH' | 'CRITICAL';

/** What runs. `argv` is exec'd as is (no shell); primitives are Airlock's own file operations. */
export type ActionRun =
  | { kind: 'argv'; argv: string[] }
  | { kind: 'code'; language: 'python'; code: string }
  | { kind: 'primitive'; op: FilePrimitive }
  /** A composite: its steps (`children`) run one by one, each in its own sandbox; promoted as one unit. */
  | { kind: 'steps' };

/** FILE_* and DIRECTORY_* actions, carried out by Airlock's own code inside the sandbox. */
export type FilePrimitive =
  | { op: 'delete'; globs: string[] }
  | { op: 'write'; path: string; contentBase64: string }
  | { op: 'move'; from: string; to: string }
  | { op: 'mkdir'; path: string }
  | { op: 'rmdir'; path: string }
  | { op: 'read'; path: string };

export interface ActionInput {
  name: string;
  sha256: string;
}

/** Every limit is explicit: the front door or the policy must give a number. */
export interface ActionLimits {
  wallMs: number;
  cpuMs: number;
  memoryBytes: number;
  /** Bytes the run may write (to /out and to the declared scope together). */
  diskBytes: number;
  /** Entries (files, directories, links) the run may leave in /out and its scopes together, and in /tmp with /dev/shm. */
  files: number;
  pids: number;
  stdoutBytes: number;
  stderrBytes: number;
}

export interface DeclaredEffects {
  /** Absolute paths or globs, as declared (`/p/tmp/*.log`). */
  create: string[];
  modify: string[];
  delete: string[];
  /** Folders in which any change (added, modified, deleted; dot-names included, unlike a `**` glob)
   *  is declared: `airlock exec --rw DIR`, where the person states "this folder may change". */
  anyChangeIn?: string[];
  network: boolean;
  systemStateChange: boolean;
}

/** What must hold on the real host when the action's result is promoted (an Action Descriptor's preconditions). */
export interface Preconditions {
  pathsExist: string[];
  networkAvailable: boolean;
  userIdle: boolean;
}

export const NO_PRECONDITIONS: Preconditions = { pathsExist: [], networkAvailable: false, userIdle: false };

export interface Action {
  /** request_id (TR) or action_id (descriptor); the key for logs and audit. */
  id: string;
  source: 'tool-request' | 'action-descriptor' | 'utp' | 'argv';
  /** What kind of action it is, as its door names it (an Action Descriptor's action_type; TOOL_REQUEST; UTP_TOOL...). */
  kind: string;
  lane: Lane;
  run: ActionRun;
  inputs: ActionInput[];
  /** Absolute paths under /out that the request says it will produce (informational). */
  outputsExpected: string[];
  /**
   * Declared filesystem scope (absolute), seen through a copy-on-write overlay. Empty for TRs.
   * `readOnly`: those of `paths` the program sees read-only (`airlock exec --ro`).
   */
  scope: { paths: string[]; recursive: boolean; readOnly?: string[] };
  effects: DeclaredEffects;
  limits: ActionLimits;
  network: { mode: 'none' | 'allowlist'; allowlist: string[] };
  risk: RiskLevel;
  /** The declaration asks for a person's confirmation before promotion. */
  confirmationRequired: boolean;
  rollbackSupported: boolean;
  sandboxRequired: boolean;
  preconditions: Preconditions;
  /** After a rollback, the same declaration waits the policy's cooldown before it may be promoted again. */
  cooldownOnRepeat: boolean;
  /** The steps of a composite (run kind `steps`), in order. */
  children?: Action[];
  /** Working directory inside the sandbox (default: /in for a Tool Request, else /tmp). */
  cwd?: string;
  /** The human-readable line that says what runs (a TR's command line, a descriptor's argv...). */
  display: string;
}

/** Host defaults for limits a front door does not state (a TR has no pids or output caps). */
export const DEFAULT_LIMITS = {
  pids: 64,
  stdoutBytes: 1024 * 1024,
  stderrBytes: 1024 * 1024,
  diskBytes: 64 * 1024 * 1024,
  files: 50_000,
} as const;

/** The host path a declared scope covers: its literal prefix (a glob ends it), as the ns lane mounts it. */
export const scopeHostPath = (declared: string): string => '/' + literalPrefix(pathSegments(declared)).join('/');
