// What a long-lived service keeps ready, so that a request does not pay for a cold start: Monty
// workers (monty-pool.ts), ns sandboxes started ahead of need per shape (ns/pool.ts), launchers
// already in fresh cgroups for the ns runs started on request (ns/held.ts), and run folders per
// workspace (run-folder.ts). A one-shot command starts what it needs on demand instead.
import { closeSandboxPool, configureSandboxPool } from '../sandbox/ns/pool.js';
import { keepLaunchersHeld } from '../sandbox/ns/held.js';
import { closeMontyPools } from '../sandbox/lanes/monty-pool.js';
import { warmMontyLane } from '../sandbox/lanes/monty.js';
import { keepRunFoldersReady } from './run-folder.js';

/**
 * Monty: `min` workers (AIRLOCK_MONTY_WARM, else 2) when the policy lets that lane run. ns: per shape
 * of limits, AIRLOCK_SANDBOX_POOL sandboxes (else 2) after the first run of that shape. 0 turns either off.
 * AIRLOCK_HELD_LAUNCHERS launchers (else 2) held for ns runs started on request. Run folders: made
 * ahead per workspace, after its first run.
 */
export function warmLanes(o: { monty: boolean }): void {
  if (o.monty) warmMontyLane();
  const n = Number(process.env.AIRLOCK_SANDBOX_POOL ?? 2);
  if (Number.isSafeInteger(n) && n > 0) configureSandboxPool(n);
  const held = Number(process.env.AIRLOCK_HELD_LAUNCHERS ?? 2);
  if (Number.isSafeInteger(held) && held > 0) void keepLaunchersHeld(held);
  keepRunFoldersReady(true);
}

/** Stops the workers, kills the sandboxes waiting and removes the run folders made ahead (a service's shutdown). */
export async function closeLanes(): Promise<void> {
  keepRunFoldersReady(false);
  await Promise.all([closeMontyPools(), closeSandboxPool(), keepLaunchersHeld(0)]);
}
