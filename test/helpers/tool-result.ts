import { createHash } from 'node:crypto';
import { captureStream, standardSafetyNotes, type ToolResult } from '../../src/contracts/tool-result.js';

export const sha = (s: string | Buffer) => createHash('sha256').update(s).digest('hex');

/** The file name of `sampleResult()`: its result_id + `.md`. */
export const SAMPLE_NAME = 'TS-20260209-161030Z-TR-20260209-160501Z-python-stats.md';

/** A valid result a host could write after a run (`over` replaces fields). */
export function sampleResult(over: Partial<ToolResult> = {}): ToolResult {
  const stdout = 'rows: 1204\nmean age: 41.3\nwrote /out/output.json\n';
  return {
    result_id: SAMPLE_NAME.slice(0, -3),
    created_utc: '2026-02-09T16:10:30Z',
    request_id: 'TR-20260209-160501Z-python-stats',
    executor: 'airlock',
    backend: 'ns',
    exit_code: 0,
    runtime_sec: 3.4,
    network_used: 'none',
    network_destinations: [],
    artifacts: [{ path: 'output.json', sha256: sha('{}'), description: 'Statistics as JSON' }],
    stdout_sha256: sha(stdout),
    stderr_sha256: sha(''),
    summary: 'Ran script.py on input.csv; exited 0 and wrote /out/output.json.',
    provenance: { command: 'python -u script.py --in /in/input.csv --out /out/output.json', backend: 'ns (bubblewrap 0.9.0)', limits: { cpu: 2, memory_mb: 1024, time_sec: 120 } },
    stdout: captureStream(stdout, 'stdout.txt'),
    stderr: captureStream('', 'stderr.txt'),
    safety_notes: standardSafetyNotes({ network_used: 'none', network_destinations: [] }),
    ...over,
  };
}
