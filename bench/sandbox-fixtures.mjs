// Shared by bench/sandbox.mjs, bench/sandbox-cpu.mjs and bench/monty.mjs: the COMMAND_EXECUTION descriptor
// of /bin/true with one declared scope that a full Airlock run validates, sandboxes, observes, judges and
// renders, and the Tool Request of a trivial Monty program.
import { mkdirSync } from 'node:fs';

export const SCOPE_DIR = '/var/tmp/airlock-bench/scope';
mkdirSync(SCOPE_DIR, { recursive: true });

/** The descriptor of `command` (an argv), otherwise the same as `descriptor`. */
export const descriptorFor = (command) => JSON.stringify({ ...JSON.parse(descriptor), intent_summary: `Run ${command.join(' ')}.`, command });

export const descriptor = JSON.stringify({
  descriptor_version: '1.0',
  action_id: '6f1c2b3a-4d5e-4f60-8a7b-9c0d1e2f3a4b',
  created_at: '2026-11-22T00:00:00Z',
  created_by: 'ai',
  intent_summary: 'Run /bin/true.',
  action_type: 'COMMAND_EXECUTION',
  risk_level: 'LOW',
  scope: { filesystem: { paths: [SCOPE_DIR], recursive: false }, network: { required: false }, ui: { required: false } },
  resources: { max_cpu_ms: 1000, max_memory_mb: 64, max_disk_mb: 1, max_duration_ms: 5000 },
  preconditions: {},
  effects: { filesystem: { create: [], modify: [], delete: [] }, network: false, system_state_change: false },
  sandbox: { required: true, sandbox_type: 'namespace', allow_network: false, max_runs: 1 },
  rollback: { supported: true, rollback_type: 'filesystem_snapshot', rollback_scope: 'declared_effects_only' },
  confirmation: { required: false, reason: '', cooldown_on_repeat: false },
  audit: { log: true, log_level: 'SUMMARY', retain_days: 30 },
  command: ['/bin/true'],
});

/** The Monty Tool Request below with another (one-line) program. */
export const montyRequestFor = (code) => montyRequest.replace('\n1 + 1\n', `\n${code}\n`);

/** A Tool Request whose program is `1 + 1` in the Monty lane. */
export const montyRequest = `---
request_type: tool_request
schema_version: 1
request_id: "TR-20261122-000000Z-bench-monty"
created_utc: "2026-11-22T00:00:00Z"
requested_by: "core_draft"
approved_by: "bench"
approved_utc: "2026-11-22T00:00:01Z"
purpose: "Benchmark a trivial Monty program."
language: "python"
backend: "monty"
network: "none"
network_allowlist: []
cpu_limit: "1"
memory_limit_mb: 64
time_limit_sec: 5
inputs: []
outputs_expected: []
constraints: []
---

## Code

\`\`\`python
1 + 1
\`\`\`

## Input Files

None.

## Output Expectations

None.

## Risk Assessment

- Risk level: low
- Justification: arithmetic.
- Data sensitivity: public
- Network rationale: none
`;
