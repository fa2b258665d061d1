import assert from 'node:assert/strict';
import { spawnSync } from 'node:child_process';
import { mkdtempSync, readFileSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { test } from 'node:test';
import { screenContent } from '../../src/contracts/forbidden-content.js';
import { captureStream, renderToolResult, toolResultContract, type ToolResult } from '../../src/contracts/tool-result.js';
import { repoPath } from '../helpers/paths.js';
import { SAMPLE_NAME, sampleResult, sha } from '../helpers/tool-result.js';

/**
 * The result screen measured on two corpora (test/fixtures/corpus, made by generate.mjs there):
 * disguised payloads (instructions, policy claims, secrets hidden by 18 evasion families) must be
 * found, real-looking benign output must pass. Measured the way the doors see them: raw program
 * output through the shared screen (UTP, runAction for the gate and `airlock run`), Airlock's own
 * Tool Result of that output, and another executor's result carrying the raw text.
 */

interface Sample {
  id: string;
  family?: string;
  kind?: string;
  text: string;
}
const load = (name: string): Sample[] => JSON.parse(readFileSync(repoPath('test/fixtures/corpus', name), 'utf8')) as Sample[];
const disguised = load('disguised.json');
const benign = load('benign.json');
const pct = (n: number, of: number) => `${((100 * n) / of).toFixed(1)}%`;
const NAME = SAMPLE_NAME;

const screen = (text: string) => screenContent([{ where: 'stdout', text }]);

/** Airlock's own Tool Result for a run that printed `text` (the gate's and `airlock run`'s document). */
const airlockResult = (text: string): ToolResult => sampleResult({ artifacts: [], stdout: captureStream(text, 'airlock-stdout.txt'), stdout_sha256: sha(text) });

/** Another executor's result (ERA style) with the raw text in a fenced Stdout, as the spec allows. */
function foreignResult(text: string): string {
  return renderToolResult({ ...airlockResult(''), executor: 'tool-exec', backend: 'ERA', provenance: { command: 'python3 main.py', backend: 'ERA 0.4', limits: {}, limits_text: '1 CPU, 256 MB memory, 10 s' }, stdout: { lines: text.split('\n'), truncated: null } });
}

test('disguised payloads: at least 99% found by the door screen and in both kinds of Tool Result; figures per family', (t) => {
  assert.ok(disguised.length >= 200, `${disguised.length} payloads`);
  const families = new Map<string, { n: number; screen: number; identified: number; document: number }>();
  for (const d of disguised) {
    const f = families.get(d.family as string) ?? { n: 0, screen: 0, identified: 0, document: 0 };
    families.set(d.family as string, f);
    f.n++;
    const s = screen(d.text);
    if (s.problems.length > 0) f.screen++;
    // Found for what it is, not only for an invisible character around it.
    if (s.problems.some((p) => p.code !== 'TS_CONTROL_CHAR')) f.identified++;
    if (!toolResultContract.parse(foreignResult(d.text), { fileName: NAME }).ok) f.document++;
  }
  assert.ok(families.size >= 12, `${families.size} families`);
  const sum = (k: 'screen' | 'identified' | 'document') => [...families.values()].reduce((a, f) => a + f[k], 0);
  for (const [name, f] of families) t.diagnostic(`${name.padEnd(26)} screen ${f.screen}/${f.n}  identified ${f.identified}/${f.n}  document ${f.document}/${f.n}`);
  const n = disguised.length;
  t.diagnostic(`disguised: ${n} payloads in ${families.size} families: door screen ${pct(sum('screen'), n)}, identified ${pct(sum('identified'), n)}, another executor's result ${pct(sum('document'), n)}`);
  assert.ok(sum('screen') / n >= 0.99, `door screen found ${pct(sum('screen'), n)}`);
  assert.ok(sum('identified') / n >= 0.99, `identified ${pct(sum('identified'), n)}`);
  assert.ok(sum('document') / n >= 0.99, `documents refused ${pct(sum('document'), n)}`);
});

test('benign output: at most 1% refused by the door screen or in Airlock\'s Tool Result (warnings do not count)', (t) => {
  assert.ok(benign.length >= 300, `${benign.length} outputs`);
  const refusedByScreen: string[] = [];
  const refusedDocument: string[] = [];
  let warned = 0;
  for (const b of benign) {
    const s = screen(b.text);
    if (s.problems.length > 0) refusedByScreen.push(`${b.id}: ${s.problems.map((p) => p.code).join(',')}`);
    if (s.warnings.length > 0) warned++;
    const r = toolResultContract.parse(renderToolResult(airlockResult(b.text)), { fileName: NAME });
    if (!r.ok) refusedDocument.push(`${b.id}: ${r.problems.map((p) => p.code).join(',')}`);
  }
  const n = benign.length;
  const kinds = new Set(benign.map((b) => b.kind)).size;
  t.diagnostic(`benign: ${n} outputs of ${kinds} kinds: refused by the door screen ${refusedByScreen.length} (${pct(refusedByScreen.length, n)}), in Airlock's Tool Result ${refusedDocument.length} (${pct(refusedDocument.length, n)}); ${warned} with warnings only`);
  for (const x of [...refusedByScreen, ...refusedDocument]) t.diagnostic(`  refused ${x}`);
  assert.ok(refusedByScreen.length / n <= 0.01, refusedByScreen.join('\n'));
  assert.ok(refusedDocument.length / n <= 0.01, refusedDocument.join('\n'));
});

test('the corpus files are what generate.mjs writes (regenerate after changing it)', () => {
  // The generator is deterministic: run again into a temporary folder, it writes the same files.
  const dir = mkdtempSync(join(tmpdir(), 'airlock-corpus-'));
  const r = spawnSync(process.execPath, [repoPath('test/fixtures/corpus/generate.mjs'), dir], { encoding: 'utf8' });
  assert.equal(r.status, 0, r.stderr);
  for (const name of ['disguised.json', 'benign.json']) assert.equal(readFileSync(join(dir, name), 'utf8'), readFileSync(repoPath('test/fixtures/corpus', name), 'utf8'), name);
  rmSync(dir, { recursive: true, force: true });
});
