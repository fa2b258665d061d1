// What every ns sandbox is started with, whether on request (runner.ts) or ahead of need (pool.ts).
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import type { HostCapabilities } from '../doctor.js';
import { SANDBOX_GID, SANDBOX_UID } from '../rootfs.js';
import { buildSeccompFilter } from './seccomp.js';

/** Namespaces, no capabilities, the sandbox's ids and hostname; bwrap's init dies with its parent. */
export function namespaceArgs(bwrap: NonNullable<HostCapabilities['bwrap']>): string[] {
  const a = ['--unshare-user', '--unshare-pid', '--unshare-net', '--unshare-ipc', '--unshare-uts', '--unshare-cgroup-try', '--die-with-parent', '--new-session', '--cap-drop', 'ALL', '--uid', String(SANDBOX_UID), '--gid', String(SANDBOX_GID), '--hostname', 'airlock'];
  if (bwrap.supports.disableUserns) a.push('--disable-userns');
  return a;
}

/**
 * The root tmpfs bwrap builds is owned by the sandbox uid, and so is its /dev: made read-only once
 * everything is in place (devices still work; only /dev/shm stays writable, and capped).
 */
export const READ_ONLY_ROOT = ['--remount-ro', '/dev', '--remount-ro', '/'];

/** The filter without SECCOMP_RET_TRACE stops (node launches), built once. */
let plainFilter: Buffer | null = null;
export const plainSeccompFilter = (): Buffer => (plainFilter ??= buildSeccompFilter());

/** The filter with SECCOMP_RET_TRACE stops for the host tracer, written once into the root-owned staging base. */
let observeFilterFile: string | null = null;
export function observeFilterIn(base: string): string {
  if (observeFilterFile === null) {
    const f = join(base, 'seccomp-observe.bpf');
    writeFileSync(f, buildSeccompFilter(process.arch, { observe: true }), { mode: 0o600 });
    observeFilterFile = f;
  }
  return observeFilterFile;
}
