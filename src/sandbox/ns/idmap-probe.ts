// Whether runs that may write a scope can have a uid of their own here: the kernel must make an
// idmapped mount (5.12+) of a folder on TMPDIR's filesystem and take it as an overlay's lower dir
// (5.19+; detached from 6.15, attached for the mount's time before), and native/idmap.c must be
// built. `airlock doctor` asks; runs do not (each finds out on its own scopes, runner.ts).
import { mkdirSync, rmSync } from 'node:fs';
import { join } from 'node:path';
import { ownedTempDir } from '../../base/owner.js';
import { RUN_ID_RANGE } from '../run-ids.js';
import type { HostCapabilities } from '../doctor.js';
import { hostOps } from './hostops.js';
import { mounter } from './staging.js';

/** Null when it works; else why not. */
export async function probeScopeIdmap(c: HostCapabilities, sandboxUid: number): Promise<string | null> {
  const mnt = mounter(c, hostOps(c.perlBinary));
  const d = ownedTempDir('idmap');
  const [lower, upper, work, merged] = ['lower', 'upper', 'work', 'merged'].map((n) => join(d, n)) as [string, string, string, string];
  for (const p of [lower, upper, work, merged]) mkdirSync(p, { mode: 0o700 });
  try {
    await mnt.overlay(lower, upper, work, merged, false, { from: sandboxUid, to: RUN_ID_RANGE.first });
    const left = await mnt.unmount(merged);
    return left === null ? null : `it mounted, but ${left}`;
  } catch (e) {
    return (e as Error).message;
  } finally {
    rmSync(d, { recursive: true, force: true });
  }
}
