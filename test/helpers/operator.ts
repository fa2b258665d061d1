import { mkdtempSync, readFileSync, writeFileSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { parseDocument, isSeq } from 'yaml';
import { generateOperatorKey } from '../../src/approval/keys.js';

/**
 * A real operator for a test: an Ed25519 key pair in a fresh key folder (owner-only, as
 * `airlock keygen` makes it) and its public key listed in `policyFile`, without the CLI.
 */
export function addOperator(policyFile: string, name: string, keyDir = mkdtempSync(join(tmpdir(), 'airlock-keys-'))): { keyDir: string; publicKey: string } {
  const made = generateOperatorKey(name, keyDir);
  if ('error' in made) throw new Error(made.error);
  const doc = parseDocument(readFileSync(policyFile, 'utf8'));
  const ops = doc.get('operators');
  if (!isSeq(ops)) throw new Error(`${policyFile} has no operators list`);
  ops.flow = false;
  ops.add(doc.createNode({ name, public_key: made.publicKey }));
  writeFileSync(policyFile, doc.toString({ lineWidth: 0 }));
  return { keyDir, publicKey: made.publicKey };
}
