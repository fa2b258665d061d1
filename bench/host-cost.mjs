// npm run bench:host-cost — what a hostile program's output costs the host, through a real
// `airlock run` (a separate process, as an operator runs it): a flood of 200,000 empty files in /out,
// and a 1 TiB sparse file in /out. Prints the host's wall time, the airlock process's peak RSS
// (ru_maxrss of the child, read by a python wrapper), the bytes the run left in its folder and the
// verdict. AIRLOCK_BIN=path/to/bin/airlock measures another build the same way (e.g. an older main);
// case names as arguments run only those.
import { spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

const bin = process.env.AIRLOCK_BIN ?? new URL('../bin/airlock', import.meta.url).pathname;
const sha = (s) => createHash('sha256').update(s).digest('hex');

function request(slug, script, timeSec) {
  const dir = mkdtempSync(join(tmpdir(), `airlock-bench-${slug}-`));
  writeFileSync(join(dir, 'a.py'), script);
  const file = join(dir, `TR-20261125-000000Z-${slug}.md`);
  writeFileSync(file, `---
request_type: tool_request
schema_version: 1
request_id: "TR-20261125-000000Z-${slug}"
created_utc: "2026-11-25T00:00:00Z"
requested_by: "core_draft"
approved_by: "operator:bench"
approved_utc: "2026-11-25T00:01:00Z"
purpose: "Bench ${slug}."
language: "python"
network: "none"
network_allowlist: []
cpu_limit: "1"
memory_limit_mb: 256
time_limit_sec: ${timeSec}
inputs:
  - name: "a.py"
    sha256: "${sha(script)}"
outputs_expected: []
constraints:
  - "No writes outside /out"
---

## Command

python3 a.py

## Input Files

- \`/in/a.py\`

## Output Expectations

No files: stdout only.

## Risk Assessment

- Risk level: low
- Justification: a benchmark of hostile output.
- Data sensitivity: public
- Network rationale: none
`);
  return file;
}

// ru_maxrss of the airlock process (the largest child the wrapper waited for), and its wall time.
const WRAP = `import resource, subprocess, sys, time
t = time.monotonic()
r = subprocess.run(sys.argv[1:], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
print(time.monotonic() - t, resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss, r.returncode)
sys.stdout.buffer.write(r.stdout)`;

function measure(name, script, timeSec) {
  const ws = mkdtempSync(join(tmpdir(), 'airlock-bench-ws-'));
  const r = spawnSync('/usr/bin/python3', ['-c', WRAP, bin, 'run', request(name, script, timeSec), '--workspace', ws, '--json'], { encoding: 'utf8', maxBuffer: 1 << 30 });
  const [head, ...rest] = r.stdout.split('\n');
  const [secs, maxRssKb, code] = head.split(' ').map(Number);
  let verdict = '?';
  let reasons;
  try {
    const sr = JSON.parse(rest.join('\n'));
    verdict = sr.verdict.recommended_action;
    reasons = sr.verdict.reasons.slice(0, 2).join('; ').slice(0, 160);
  } catch {
    reasons = `no Sandbox Result (exit ${code}): ${r.stderr.slice(0, 160)}`;
  }
  const du = spawnSync('du', ['-sb', join(ws, 'runs')], { encoding: 'utf8' }).stdout.split('\t')[0];
  console.log(`${name.padEnd(12)} wall ${secs.toFixed(1).padStart(6)} s   airlock peak RSS ${(maxRssKb / 1024).toFixed(0).padStart(5)} MiB   run folder ${(Number(du) / 1048576).toFixed(1).padStart(8)} MiB   exit ${code}   ${verdict}: ${reasons}`);
}

const cases = {
  'file-flood': ['made = 0\nfor i in range(200000):\n  try: open(f"/out/f{i}", "w").close(); made += 1\n  except OSError: pass\nprint(made)\n', 300],
  'sparse-4gib': ['open("/out/huge", "wb").truncate(4 << 30)\nprint("ok")\n', 60],
  'sparse-1tib': ['open("/out/huge", "wb").truncate(1 << 40)\nprint("ok")\n', 60],
};
// `node bench/host-cost.mjs sparse-1tib` runs only the cases named.
const only = process.argv.slice(2);
console.log(`airlock: ${bin}`);
for (const [name, [script, secs]] of Object.entries(cases)) if (only.length === 0 || only.includes(name)) measure(name, script, secs);
