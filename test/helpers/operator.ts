import { mkdtempSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { generateOperatorKey, loadOperatorKey } from '../../src/approval/keys.js';
import { signRegistration } from '../../src/approval/tool-registration.js';
import type { ToolRecord } from '../../src/store/types.js';
import { addOperatorToPolicy } from '../../src/policy/operators.js';

/**
 * A real operator for a test: an Ed25519 key pair in a fresh key folder (owner-only, as
 * `airlock keygen` makes it) and its public key listed in `policyFile`, without the CLI.
 */
export function addOperator(policyFile: string, name: string, keyDir = mkdtempSync(join(tmpdir(), 'airlock-keys-'))): { keyDir: string; publicKey: string } {
  const made = generateOperatorKey(name, keyDir);
  if ('error' in made) throw new Error(made.error);
  const err = addOperatorToPolicy(policyFile, name, made.publicKey);
  if (err) throw new Error(err);
  return { keyDir, publicKey: made.publicKey };
}

/** `t` signed by an operator from addOperator, as `airlock tools add --operator` signs it. */
export function signTool(t: ToolRecord, op: { name: string; keyDir: string }, now = new Date()): ToolRecord {
  const key = loadOperatorKey(op.name, op.keyDir);
  if ('error' in key) throw new Error(key.error);
  return { ...t, signature: signRegistration({ tool: t, operator: op.name, key: key.key, publicKey: key.publicKey, now }) };
}
