import { createHash } from 'node:crypto';
import { mkdtempSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';

export interface DraftRequest {
  slug: string;
  language?: 'python' | 'node' | 'ruby' | 'go' | 'ts';
  command: string;
  /** Input files by name: their content (hashed into the request). */
  inputs: Record<string, string>;
  outputs?: string[];
  timeLimitSec?: number;
  memoryMb?: number;
  risk?: 'low' | 'medium' | 'high';
}

const sha = (s: string) => createHash('sha256').update(s).digest('hex');

/** Writes a valid, approved TR-*.md and its inputs into a fresh folder; returns the request's path. */
export function writeRequest(d: DraftRequest, dir = mkdtempSync(join(tmpdir(), 'airlock-tr-'))): { dir: string; file: string; id: string } {
  const id = `TR-20260301-120000Z-${d.slug}`;
  const outputs = d.outputs ?? [];
  for (const [name, content] of Object.entries(d.inputs)) writeFileSync(join(dir, name), content);
  const text = `---
request_type: tool_request
schema_version: 1
request_id: "${id}"
created_utc: "2026-03-01T12:00:00Z"
requested_by: "core_draft"
approved_by: "operator:test"
approved_utc: "2026-03-01T12:01:00Z"
purpose: "Test request ${d.slug}."
language: "${d.language ?? 'python'}"
network: "none"
network_allowlist: []
cpu_limit: "1"
memory_limit_mb: ${d.memoryMb ?? 256}
time_limit_sec: ${d.timeLimitSec ?? 10}
inputs:
${Object.entries(d.inputs).map(([n, c]) => `  - name: "${n}"\n    sha256: "${sha(c)}"`).join('\n')}
outputs_expected:
${outputs.length === 0 ? '  []' : outputs.map((o) => `  - path: "${o}"\n    description: "an output"`).join('\n')}
constraints:
  - "No writes outside /out"
---

## Command

${d.command}

## Input Files

${Object.keys(d.inputs).map((n) => `- \`/in/${n}\``).join('\n')}

## Output Expectations

${outputs.length === 0 ? 'No files: stdout only.' : outputs.map((o) => `- \`/out/${o}\``).join('\n')}

## Risk Assessment

- Risk level: ${d.risk ?? 'low'}
- Justification: a test.
- Data sensitivity: public
- Network rationale: none
`;
  const file = join(dir, `${id}.md`);
  writeFileSync(file, text.replace('outputs_expected:\n  []', 'outputs_expected: []'));
  return { dir, file, id };
}
