import { mkdirSync, mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { openWorkspace, type Workspace } from '../../src/workspace/workspace.js';

/**
 * Where tests put real trees that actions act on (outside /tmp: the sandbox has its own /tmp).
 * scripts/test.mjs makes one per test run and removes it after, so runs neither share nor leave it.
 */
export const TEST_SCOPE_ROOT = process.env.AIRLOCK_TEST_SCOPE_ROOT ?? '/var/tmp/airlock-test';

/** A new folder under TEST_SCOPE_ROOT (made if missing: a test file may run without scripts/test.mjs). */
export function testScopeDir(prefix: string): string {
  mkdirSync(TEST_SCOPE_ROOT, { recursive: true });
  return mkdtempSync(join(TEST_SCOPE_ROOT, prefix));
}

/** Lists `roots` as the policy's scope_roots (the default policy allows no scope at all). */
export function allowScopes(policyFile: string, roots: string[] = [TEST_SCOPE_ROOT]): void {
  const text = readFileSync(policyFile, 'utf8');
  const next = text.replace(/^scope_roots: \[\]/m, `scope_roots: [${roots.join(', ')}]`);
  if (next === text) throw new Error(`${policyFile} has no empty scope_roots line to fill`);
  writeFileSync(policyFile, next);
}

/** A new workspace whose policy lets actions act under TEST_SCOPE_ROOT. */
export function scopedWorkspace(dir = mkdtempSync(join(tmpdir(), 'airlock-ws-'))): Workspace {
  mkdirSync(TEST_SCOPE_ROOT, { recursive: true });
  const ws = openWorkspace(dir);
  allowScopes(ws.policyFile);
  return ws;
}
