import { readFileSync, writeFileSync } from 'node:fs';
import { isSeq, parseDocument } from 'yaml';
import { parsePolicy } from './policy.js';

/** Adds an operator's public key to a policy file, keeping its comments; the reason when it cannot. */
export function addOperatorToPolicy(policyFile: string, name: string, publicKey: string): string | null {
  const doc = parseDocument(readFileSync(policyFile, 'utf8'));
  const ops = doc.get('operators');
  if (!isSeq(ops)) return 'policy.yaml has no operators list';
  ops.flow = false;
  ops.add(doc.createNode({ name, public_key: publicKey }));
  const text = doc.toString({ lineWidth: 0 });
  const check = parsePolicy(text);
  if (!check.ok) return `the policy would become invalid: ${check.problems.map((p) => p.message).join('; ')}`;
  writeFileSync(policyFile, text, { mode: 0o600 });
  return null;
}
