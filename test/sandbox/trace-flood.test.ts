// A flood of observed events (attack): every event line of a run was kept in the host's memory until
// the run ended, without a bound. Opening a 4,000-character path under /root in a loop (each attempt
// is a line carrying the path in hex) grew the host process by ~90 MB a second: 1 GB after a 10 s
// run, and the policy lets a run last 300 s. The host keeps a run's trace up to a budget; past it the
// trace is incomplete, said so, and the run is judged without trusted side effects (BLOCK).
import { test } from 'node:test';
import assert from 'node:assert/strict';
import { MAX_TRACE_CHARS, syscallTracer } from '../../src/sandbox/observe/tracer.js';
import { py, text } from './helpers-ns.js';

const skip = syscallTracer() === null ? 'no host tracer here (not root or native/tracer.c not built)' : false;

test('hostile: a flood of observed attempts does not grow the host without bound; the trace is then incomplete, with why', { skip, timeout: 120_000 }, async () => {
  // Enough lines to pass the budget twice over, then the program ends on its own.
  const perLine = 8_000;
  const n = Math.ceil((2 * MAX_TRACE_CHARS) / perLine);
  const code = ['import os', 'p = "/root/" + "a" * 4000', `for _ in range(${n}):`, '  try: os.open(p, os.O_RDONLY)', '  except OSError: pass', 'print("done")'].join('\n');
  const o = await py(code, { limits: { wallMs: 60_000, cpuMs: 60_000 } });
  assert.equal(o.status, 'SUCCESS', text(o));
  assert.equal(o.stdout.bytes.toString(), 'done\n');
  assert.equal(o.sideEffects, null, `side effects were reported from a trace past its budget: ${o.sideEffects?.fileAccess.length} file accesses`);
  assert.match(o.sideEffectsUnavailable ?? '', /trace of this run passed .* the rest was not kept/);
});
