import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import * as runner from '../dist/src/sandbox/ns/runner.js';
const LIMITS = { wallMs: 5000, cpuMs: 3000, memoryBytes: 256 << 20, pids: 64, outBytes: 1 << 20, tmpBytes: 4 << 20, files: 10_000, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 };
const base = mkdtempSync(join(tmpdir(), 'airlock-bench-'));
let k = 0;
const T = {};
const p50 = (xs) => { const s = [...xs].sort((a, b) => a - b); return s[Math.floor(s.length / 2)].toFixed(2); };
for (let i = 0; i < 260; i++) for (const trace of [true, false]) {
  const t0 = performance.now();
  const o = await runner.runNs({ argv: ['/bin/true'], outDir: join(base, String(k++)), limits: LIMITS, traceSyscalls: trace });
  const w = performance.now() - t0;
  if (o.status !== 'SUCCESS') throw new Error(o.reason);
  if (i < 60) continue;
  for (const [kk, v] of Object.entries({ ...o.timings, wall: w })) (T[`${trace ? 'trace' : 'notrace'} ${kk}`] ??= []).push(v);
}
for (const k of Object.keys(T).sort()) console.log(k.padEnd(24), p50(T[k]));
process.exit(0);
