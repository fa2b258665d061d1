// The raw observation of one `ns` sandbox run, as the host measured it.
// Everything here comes from the host side (cgroup files, the strace log written by a root-owned
// tracer, the host's own pipes and timers, the fs diff of host-side staging dirs): nothing the
// sandboxed program can write is read as evidence.
import type { Problem } from '../base/problem.js';
import type { FsChange, ObservedSideEffects } from './observe/types.js';
import type { NetworkGrant } from '../base/allowlist.js';
import type { NetworkCaps, NetworkObservation } from './egress/records.js';
import type { Resolver } from './egress/resolver.js';
import type { HostIdsKind } from './run-ids.js';

export type { FsChange, ObservedSideEffects } from './observe/types.js';

export type RunStatus = 'SUCCESS' | 'FAILURE' | 'TIMEOUT' | 'RESOURCE_KILLED' | 'POLICY_ABORTED' | 'SANDBOX_ERROR';

/** Every limit a run can carry. All are required: the caller (policy) decides the numbers. */
export interface Limits {
  /** Wall-clock time from spawn to kill, enforced by a host timer. */
  wallMs: number;
  /** CPU time of all the sandbox's processes together (cgroup accounting) and of each (RLIMIT_CPU). */
  cpuMs: number;
  /** cgroup memory limit (and swap = 0 where the host accounts swap). */
  memoryBytes: number;
  /** cgroup pids limit: processes + threads alive at once. */
  pids: number;
  /** Size cap of /out (tmpfs size when root, else RLIMIT_FSIZE per file + a post-check). */
  outBytes: number;
  /** Size cap of /tmp and /dev/shm together (one tmpfs), inside the sandbox. */
  tmpBytes: number;
  /**
   * Entries (files, folders, links) the run may leave in /out and the scope overlays together, and
   * in /tmp with /dev/shm (tmpfs nr_inodes when root); the host's diff stops past it too.
   */
  files: number;
  /** How much of stdout/stderr the host keeps (the rest is counted and hashed, then dropped). */
  stdoutBytes: number;
  stderrBytes: number;
}

export type LimitName = keyof Limits;

export interface NsInput {
  /** Host path of a file the caller has already hash-checked. */
  hostPath: string;
  /** File name under /in (no slash, no leading dot, [A-Za-z0-9._-]). */
  name: string;
  /** The sha256 the request declared: the staged copy must have it, or nothing runs (NS_INPUT_HASH_MISMATCH). */
  sha256?: string;
}

export interface NsScope {
  /** Absolute host path of a declared scope (file or directory); seen at the same path inside, through a copy-on-write overlay. */
  hostPath: string;
  /** Seen read-only inside (the overlay or the file's copy bound read-only): the program cannot change it. */
  readOnly?: boolean;
}

/** What a run reports while it goes: its phase, and the program's output as it comes. */
export type RunEvent =
  | { kind: 'phase'; phase: 'staging' | 'running' | 'observing' }
  /** Up to the stream's capture cap; then one `dropped` event (the host still counts and hashes the rest). */
  | { kind: 'output'; stream: 'stdout' | 'stderr'; chunk: Buffer }
  | { kind: 'dropped'; stream: 'stdout' | 'stderr'; afterBytes: number };

export interface NsRunSpec {
  /** argv[0] absolute inside the sandbox, or a bare name resolved on the read-only root's PATH. */
  argv: string[];
  /** Extra environment on top of the allowlist (names [A-Z_][A-Z0-9_]*; see SAFE_ENV_RULES in env.ts). */
  env?: Record<string, string>;
  /** Working directory inside the sandbox (default /tmp). */
  cwd?: string;
  inputs?: NsInput[];
  /** Host directory that receives a copy of /out when the run ends: made then, only when /out holds something (absent or an empty folder before the run). */
  outDir: string;
  /** The caller is making outDir's parent (a run folder on a disk): outDir is made after it, and nothing starts if it failed. */
  outDirParent?: Promise<unknown>;
  scopes?: NsScope[];
  limits: Limits;
  /** Observe syscalls (default: true): with the host tracer when built and root, else strace when installed. */
  traceSyscalls?: boolean;
  /** Keep the new content of added/modified scope files here, by sha256 (what promotion applies). */
  keepScopeContent?: string;
  /** Keep the pre-images of modified/deleted scope files here, by sha256 (what rollback restores). */
  keepScopePreimages?: string;
  /** Aborting it kills the whole sandbox (status POLICY_ABORTED, "canceled by the caller"). */
  signal?: AbortSignal;
  /** Network by allowlist (docs/network.md): absent = no network at all (empty namespace, no proxy). */
  network?: NsNetworkSpec;
  /** Progress and live output, for a person watching (the observation is the same without it). */
  onEvent?: (e: RunEvent) => void;
}

/** What the run may reach through the host proxy, and how much. */
export interface NsNetworkSpec {
  /** The request's allowlist intersected with the policy's ceiling (networkGrant() in src/network/allowlist.ts). */
  grant: NetworkGrant;
  caps: NetworkCaps;
  /** How the proxy resolves names (default: the host's resolver). Injected by tests and benchmarks only. */
  resolve?: Resolver;
}

export interface CapturedStream {
  /** The first `cap` bytes. */
  bytes: Buffer;
  /** Every byte the program wrote, counted by the host. */
  totalBytes: number;
  truncated: boolean;
  /** sha256 of the whole stream (not only the kept part). */
  sha256: string;
}

export type ResourceField =
  | 'cpuUserMs'
  | 'cpuSystemMs'
  | 'peakMemoryBytes'
  | 'diskWriteBytes'
  | 'networkBytesIn'
  | 'networkBytesOut'
  | 'wallMs';

export type Resources = Record<ResourceField, number | null> & {
  /** Why each null figure could not be measured. */
  unmeasured: Partial<Record<ResourceField, string>>;
  /** How a measured figure was obtained when it is not obvious (e.g. network 0 by construction). */
  basis: Partial<Record<ResourceField, string>>;
};

export interface RunExit {
  code: number | null;
  signal: string | null;
  /** 'tracer' / 'strace': the syscall tracer saw the program's end; 'bwrap-exit-code': inferred from bwrap's 128+N convention. */
  source: 'tracer' | 'strace' | 'bwrap-exit-code' | 'monty-worker' | 'none';
}

export interface ScopeObservation {
  hostPath: string;
  /** A directory (seen through an overlay) or one regular file (seen through a bound copy). */
  kind: 'dir' | 'file';
  /** The scope root as the host opened it (the directory, or a one-file scope's parent): inode and owner. */
  root: { ident: string; uid: number; gid: number };
  /** Copy-on-write mechanism used: host overlayfs mounted by root, bwrap >= 0.9 --overlay, or a bound copy of a one-file scope. */
  mechanism: 'host-overlayfs' | 'bwrap-overlay' | 'file-copy';
  changes: FsChange[] | null;
  /** Why changes is null (the diff failed: the judge must treat the scope as unverifiable). */
  error?: string;
  /** The diff stopped at one of the host's observation caps (files, bytes, time). */
  budgetExceeded?: 'files' | 'outBytes' | 'time';
}

export interface LimitEnforcement {
  limit: LimitName;
  /** How the host enforced it on this run; null when it was only reported. */
  enforcedBy: string | null;
  /** Why it was only reported, when it was. */
  reportedOnlyReason?: string;
}

export interface HostFacts {
  bwrapVersion: string;
  cgroupVersion: 1 | 2 | null;
  /** Host uid bwrap (hence the whole sandbox) ran as. */
  hostUid: number;
  /** Whose host ids those were (run-ids.ts): `own` a uid and gid of this sandbox alone; `own-gid` the sandbox user's uid (a writable scope that could not be idmapped) with a gid of its own; `shared` the sandbox user's; `caller` the caller's (not root). */
  hostIds: HostIdsKind;
  /** Why an `own-gid` run has the sandbox user's uid (the idmapped mount that failed). */
  hostIdsWhy?: string;
  /** uid the program sees inside. */
  sandboxUid: number;
  seccomp: boolean;
  /** What observed the program's syscalls: the host tracer (native/tracer.c), strace, or nothing. */
  syscallTracer: 'airlock-tracer' | 'strace' | null;
  outMechanism: 'tmpfs-size' | 'rlimit-fsize+post-check' | 'monty-mount-write-cap';
  limits: LimitEnforcement[];
  /**
   * ns lane: the sandbox was started for this run (from a launcher held in its cgroup ahead of need,
   * ns/held.ts, or forked on request), or ahead of need and taken from the pool (ns/pool.ts); either
   * way it served this run only.
   */
  sandboxStart?: 'on request' | 'on request, held launcher' | 'ahead of need';
}

export interface Observation {
  runId: string;
  startedAt: string;
  endedAt: string;
  wallMs: number;
  exit: RunExit;
  status: RunStatus;
  /** Why the status is what it is (e.g. "wall time 300 ms exceeded", "memory limit: OOM kill"). */
  reason: string;
  /** Limits the run went over (a non-empty list is non-compliance whatever the status). */
  limitsExceeded: LimitName[];
  stdout: CapturedStream;
  stderr: CapturedStream;
  resources: Resources;
  sideEffects: ObservedSideEffects | null;
  sideEffectsUnavailable?: string;
  fs: {
    /** Changes under /out (paths start with /out/). null when the diff failed. */
    out: FsChange[] | null;
    outError?: string;
    scopes: ScopeObservation[];
  };
  /** sha256 of each input as bound at /in (measured by the runner just before the run). */
  inputs: { name: string; sha256: string; bytes: number }[];
  host: HostFacts;
  /** Present when the run had the network: every request to the host proxy, allowed or refused. */
  network?: NetworkObservation;
  /** What the run left in /tmp and /dev/shm (discarded with the run; /dev/shm's use is reported). */
  scratch?: import('./ns/outputs.js').ScratchUse;
  /** Problems that made the run a SANDBOX_ERROR (spec invalid, host cannot sandbox...), else []. */
  problems: Problem[];
  /** Where the host's time went, in ms (absent when the run did not get that far). */
  timings?: RunTimings;
}

/**
 * The runner's phases: staging (until bwrap is spawned), launch (until the program is let go), program
 * (until every sandbox process is gone), observe (kill, network record, syscall trace, exit, limits,
 * status), diff (the /out and scope diffs, hashes and copies, the scratch use).
 */
export interface RunTimings {
  stagingMs: number;
  launchMs: number;
  programMs: number;
  observeMs: number;
  diffMs: number;
}
