// The whole attack suite again, with sandboxes started ahead of need (ns/pool.ts): after the first
// run of each shape of limits, these hostile programs run in pooled sandboxes, and every containment
// and every report must hold as it does in a sandbox started on request (containment.test.ts).
import { after } from 'node:test';
import assert from 'node:assert/strict';
import { closeSandboxPool, configureSandboxPool, sandboxPoolState } from '../../src/sandbox/ns/pool.js';
import { syscallTracer } from '../../src/sandbox/observe/tracer.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';

configureSandboxPool(1);
after(async () => {
  await sandboxIdle();
  // Most attacks share one shape: all but the first of them ran pooled (where this host can pool).
  if (syscallTracer() !== null) assert.ok(sandboxPoolState().served >= 8, `pooled runs: ${JSON.stringify(sandboxPoolState())}`);
  await closeSandboxPool();
});
await import('./containment.test.js');
