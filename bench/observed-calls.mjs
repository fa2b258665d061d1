// npm run bench:observed-calls — what the host tracer's stops cost a program that makes many observed
// syscalls: python opening N files in /out (default 20,000; each open for writing stops at the
// tracer), through the ns runner, RUNS times. Prints the program's own wall time (p50) and the time
// per observed open, with the host's idle-CPU setting (airlock doctor's "idle CPUs" line).
// `--compare-polling` (root, a KVM guest with haltpoll): alternates haltpoll's guest_halt_poll_ns
// between its current value and what `airlock setup --poll-idle-cpus` sets, and puts it back after.
import { mkdtempSync, rmSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { runNs, sandboxIdle } from '../dist/src/sandbox/ns/runner.js';
import { HALTPOLL_PARAM as POLL, IDLE_POLL_NS, probeIdleCpus } from '../dist/src/sandbox/idle-cpus.js';
import { fmt, percentile } from './stats.mjs';

const N = Number(process.env.BENCH_OPENS ?? 20_000);
const RUNS = Number(process.env.BENCH_RUNS ?? 5);
const code = `made = 0\nfor i in range(${N}):\n  try: open(f"/out/f{i}", "w").close(); made += 1\n  except OSError: pass\nprint(made)`;
const limits = { wallMs: 120_000, cpuMs: 120_000, memoryBytes: 256 << 20, pids: 64, outBytes: 64 << 20, tmpBytes: 4 << 20, files: N + 100, stdoutBytes: 64 << 10, stderrBytes: 64 << 10 };
const outs = mkdtempSync(join(tmpdir(), 'airlock-bench-observed-'));
let k = 0;

/** One run: the program's own wall time in ms (the runner's measure, not the host's staging and diff). */
async function run() {
  const o = await runNs({ argv: ['/usr/bin/python3', '-c', code], outDir: join(outs, String(k++)), limits, traceSyscalls: true });
  if (o.status !== 'SUCCESS' || o.stdout.bytes.toString().trim() !== String(N)) throw new Error(`run: ${o.status} ${o.reason ?? ''} ${o.stdout.bytes.toString()}`);
  if (!o.sideEffects) throw new Error(`run: not observed (${o.sideEffectsUnavailable})`);
  await sandboxIdle();
  rmSync(join(outs, String(k - 1)), { recursive: true, force: true });
  return o.resources.wallMs;
}
const line = (label, xs) => {
  const p50 = percentile([...xs].sort((a, b) => a - b), 50);
  console.log(`${label.padEnd(44)} program p50 ${fmt(p50, 0).padStart(6)} ms, ${fmt((p50 * 1000) / N, 1)} µs per observed open (runs: ${xs.map((x) => fmt(x, 0)).join(', ')})`);
  return p50;
};

const idle = probeIdleCpus();
console.log(`${N} observed opens per run, ${RUNS} runs; idle CPUs: ${idle.driver ?? 'no cpuidle driver'}${idle.pollNs !== null ? `, guest_halt_poll_ns=${idle.pollNs}` : ''}`);
await run(); // warm-up
try {
  if (!process.argv.includes('--compare-polling')) {
    const xs = [];
    for (let i = 0; i < RUNS; i++) xs.push(await run());
    line('as this host is set', xs);
  } else {
    if (idle.pollNs === null || process.getuid?.() !== 0) throw new Error('--compare-polling needs root and a KVM guest whose cpuidle driver is haltpoll (airlock doctor, "idle CPUs")');
    const [asIs, polling] = [[], []];
    try {
      for (let i = 0; i < RUNS; i++) {
        writeFileSync(POLL, String(idle.pollNs));
        asIs.push(await run());
        writeFileSync(POLL, String(IDLE_POLL_NS));
        polling.push(await run());
      }
    } finally {
      writeFileSync(POLL, String(idle.pollNs));
    }
    const a = line(`guest_halt_poll_ns=${idle.pollNs} (as set)`, asIs);
    const b = line(`guest_halt_poll_ns=${IDLE_POLL_NS} (--poll-idle-cpus)`, polling);
    console.log(`polling / as set, p50: ${fmt(b / a)}x (alternated runs; guest_halt_poll_ns put back to ${idle.pollNs})`);
  }
} finally {
  rmSync(outs, { recursive: true, force: true });
}
