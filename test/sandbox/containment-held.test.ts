// The whole attack suite again, each run started on request from the launcher a service holds ahead
// of need (ns/held.ts): every containment and every report must hold as it does in a sandbox whose
// launcher was forked for it (containment.test.ts).
import { after } from 'node:test';
import assert from 'node:assert/strict';
import { keepLaunchersHeld } from '../../src/sandbox/ns/held.js';
import { syscallTracer } from '../../src/sandbox/observe/tracer.js';
import { sandboxIdle } from '../../src/sandbox/ns/runner.js';
import type { Observation } from '../../src/sandbox/types.js';
import { onObservation } from './helpers-ns.js';

keepLaunchersHeld(1);
const starts: string[] = [];
onObservation((o: Observation) => void starts.push(o.host.sandboxStart ?? 'none'));
after(async () => {
  await keepLaunchersHeld(0);
  await sandboxIdle();
  // All but the first run (which finds none held yet) start from a held launcher where this host can hold one.
  if (syscallTracer() !== null) assert.ok(starts.filter((s) => s === 'on request, held launcher').length >= starts.length - 3, `how the runs started: ${JSON.stringify(starts)}`);
});
await import('./containment.test.js');
