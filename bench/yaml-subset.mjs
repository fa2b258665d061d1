// Throughput of front matter parsing on a typical Tool Request (run `npm run build` first).
// Usage: node bench/yaml-subset.mjs [seconds-per-case]
import { readdirSync, readFileSync } from 'node:fs';
import { parseDocument } from 'yaml';
import { parseFrontMatterDocument } from '../dist/src/contracts/markdown.js';
import { parseYamlSubset } from '../dist/src/contracts/yaml-subset.js';

const typicalRequest = `---
request_type: tool_request
schema_version: 1
request_id: "TR-20260209-160501Z-python-stats"
created_utc: "2026-02-09T16:05:01Z"
requested_by: "core_draft"
approved_by: "alice"
approved_utc: "2026-02-09T16:12:00Z"
purpose: "Compute summary statistics of the survey CSV for the weekly report."
language: "python"
network: "none" # default none
network_allowlist: [] # only if network=allowlist
cpu_limit: "2" # cores
memory_limit_mb: 1024
time_limit_sec: 120
inputs:
  - name: "input.csv"
    sha256: "9f86d081884c7d659a2feaa0c55ad015a3bf4f1b2b0b822cd15d6c15b0f00a08"
  - name: "script.py"
    sha256: "60303ae22b998861bce3b28f33eec1be758a213c86c93c076dbe9f558c11c752"
outputs_expected:
  - path: "output.json"
    description: "Summary statistics as JSON"
constraints:
  - "No network unless allowlisted"
  - "No writes outside /out"
  - "No persistence"
---

## Command

python -u script.py --in /in/input.csv --out /out/output.json

## Input Files

- /in/input.csv (sha256 9f86d081...)
- /in/script.py (sha256 60303ae2...)

## Output Expectations

- /out/output.json

## Risk Assessment

Risk level: low
Justification: pure computation on a public CSV
Data sensitivity: public
Network rationale: none needed
`;

const seconds = Number(process.argv[2] ?? 1);
/** Documents per second of CPU time (user + system): stable on a busy machine, and "one core" is what counts. */
function rate(name, fn) {
  for (let i = 0; i < 2000; i++) fn(); // warm up
  let n = 0;
  const cpu0 = process.cpuUsage();
  const until = performance.now() + seconds * 1000;
  while (performance.now() < until) {
    for (let i = 0; i < 200; i++) fn();
    n += 200;
  }
  const cpu = process.cpuUsage(cpu0);
  const perSec = Math.round(n / ((cpu.user + cpu.system) / 1e6));
  console.log(`${name.padEnd(52)} ${perSec.toLocaleString('en-US').padStart(10)} docs/s (CPU time)`);
}

const r = parseFrontMatterDocument(typicalRequest);
if (!r.ok) throw new Error(JSON.stringify(r.problems));
const yamlText = typicalRequest.split('\n---\n')[0].slice(4);
rate('yaml parseDocument(core 1.2).toJS (front matter only)', () => parseDocument(yamlText, { schema: 'core', version: '1.2', uniqueKeys: true }).toJS());
rate('parseFrontMatterDocument (typical TR)', () => parseFrontMatterDocument(typicalRequest));
const fallback = typicalRequest.replace('approved_by: "alice"', 'approved_by: |\n  alice');
if (!parseFrontMatterDocument(fallback).ok) throw new Error('fallback sample should parse');
rate('parseFrontMatterDocument (forced full-YAML fallback)', () => parseFrontMatterDocument(fallback));

// The example requests, if present: each must take the fast path.
const dir = new URL('../examples/requests/', import.meta.url);
let names = [];
try {
  names = readdirSync(dir).filter((n) => n.endsWith('.md'));
} catch {
  // no examples yet
}
for (const name of names) {
  const text = readFileSync(new URL(name, dir), 'utf8');
  const lines = text.split('\n');
  const close = lines.findIndex((l, i) => i > 0 && l.trimEnd() === '---');
  const fast = parseYamlSubset(lines, 1, close, 2) !== undefined;
  rate(`${name.slice(0, 40)} ${fast ? '(fast)' : '(FULL YAML)'}`, () => parseFrontMatterDocument(text));
}
