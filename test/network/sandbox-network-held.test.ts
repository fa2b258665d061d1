// The network suite again, each run started on request from the launcher a service holds ahead of
// need (ns/held.ts): a run with the network holds bwrap's init until the host bridge is up, which a
// held launcher's request carries as a forked launcher's does (sandbox-network.test.ts).
import { after } from 'node:test';
import assert from 'node:assert/strict';
import { keepLaunchersHeld, launcherHeld } from '../../src/sandbox/ns/held.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import { syscallTracer } from '../../src/sandbox/observe/tracer.js';

keepLaunchersHeld(1);
after(async () => {
  await keepLaunchersHeld(0);
  await sandboxIdle();
  if (syscallTracer() !== null) assert.ok(launcherHeld().served >= 10, `runs started from a held launcher: ${launcherHeld().served}`);
});
await import('./sandbox-network.test.js');
