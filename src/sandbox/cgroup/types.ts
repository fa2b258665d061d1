// One interface over cgroup v1 and v2: create a per-run group with limits, move the sandbox into it,
// read what it used, kill everything in it, remove it.

export type CgroupController = 'memory' | 'pids' | 'cpu' | 'cpuacct' | 'freezer';

export interface CgroupInfo {
  /** 2 when the unified hierarchy carries the controllers; 1 for per-controller hierarchies; null: none usable. */
  version: 1 | 2 | null;
  /** Controllers we can use for a run (v1: mounted hierarchies; v2: enabled or enableable at our parent). */
  controllers: CgroupController[];
  /** v1: mount point of each controller; v2: { unified: mountpoint }. */
  mounts: Record<string, string>;
  /** v1 memory.memsw.* present (swap accounted), v2 memory.swap.max present. */
  swapAccounting: boolean;
  /** We can create a group (root, or a subtree delegated to this user). */
  usable: boolean;
  /**
   * Parent directory of every run's group: one per v1 controller (keyed by controller), or
   * { unified } on v2. Root: <mount>/airlock; a user: the subtree delegated to them (delegation.ts).
   */
  bases: Record<string, string>;
  /** Who made the hierarchy ours: root itself, or a delegation to this user (how). null: not usable. */
  delegation: { kind: 'root' } | { kind: 'delegated'; user: string; via: string } | null;
  detail: string;
  /** What makes it usable when it is not (e.g. the delegation command to run as root). */
  fix?: string;
}

export interface CgroupLimits {
  memoryBytes: number;
  pids: number;
}

export interface CgroupUsage {
  cpuUserMs: number | null;
  cpuSystemMs: number | null;
  peakMemoryBytes: number | null;
  /** Why a null figure is null. */
  unmeasured: Partial<Record<'cpuUserMs' | 'cpuSystemMs' | 'peakMemoryBytes', string>>;
  /** The kernel's OOM killer ran in this group. */
  oomKilled: boolean;
  /** A fork/clone failed because pids.max was reached. */
  pidsLimitHit: boolean;
}

export interface RunCgroup {
  version: 1 | 2;
  /** Directories of this run's group (one per v1 hierarchy, one for v2). */
  dirs: string[];
  /** Which limits this group enforces (the rest are only reported). */
  enforces: { memory: boolean; pids: boolean; cpuAccounting: boolean };
  /** Move a process (and its future children) into the group. */
  addProcess(pid: number): void;
  /**
   * Change the memory limit of a group that lives across runs (a Monty worker's). Throws when the
   * group has no memory controller or the kernel refuses (a limit below the current usage).
   */
  setMemoryLimit(bytes: number): void;
  /** Sets the memory and pids limits of a group made ahead of its run (a held launcher's). Throws as setMemoryLimit. */
  setLimits(limits: CgroupLimits): void;
  /** Memory charged to the group now, in bytes, or null without a memory controller. */
  memoryBytes(): number | null;
  /** User and system CPU time so far, in ms, in one read where the kernel allows (a Monty worker's per-run accounting), or null. */
  cpuSplitMs(): { user: number; system: number } | null;
  /** Total CPU time (user+system) so far, in ms, or null if not accounted. Cheap: polled during the run. */
  cpuTotalMs(): number | null;
  /** True once a limit was hit (polled to stop a fork bomb at once). */
  limitHit(): { memory: boolean; pids: boolean };
  usage(): CgroupUsage;
  /** Kill every process in the group and wait until it is empty (v2 cgroup.kill; v1 freeze, SIGKILL, thaw). */
  killAll(): Promise<void>;
  /** killAll, then remove the group directories. Never throws; returns what it could not do. */
  destroy(): Promise<string[]>;
}
