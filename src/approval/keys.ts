import { createHash, createPrivateKey, createPublicKey, generateKeyPairSync, type KeyObject } from 'node:crypto';
import { chmodSync, existsSync, mkdirSync, readFileSync, statSync, writeFileSync } from 'node:fs';
import { homedir } from 'node:os';
import { join, resolve } from 'node:path';

/**
 * Operator keys. The private key stays with the operator, outside every workspace
 * (`$AIRLOCK_KEYS` or `~/.config/airlock/keys`), owner-only; the policy holds only public keys.
 */
export function keyDir(explicit?: string): string {
  return resolve(explicit ?? process.env.AIRLOCK_KEYS ?? join(homedir(), '.config', 'airlock', 'keys'));
}

export const privateKeyFile = (dir: string, operator: string): string => join(dir, `${operator}.ed25519.pem`);

/** A short, stable name of a public key for records and logs. */
export const keyId = (publicKey: string): string => createHash('sha256').update(publicKey).digest('hex').slice(0, 16);

/** `ed25519:<base64 raw 32 bytes>`, the form policy.yaml uses. */
export function encodePublicKey(key: KeyObject): string {
  const x = key.export({ format: 'jwk' }).x;
  if (!x) throw new Error('not an Ed25519 key');
  return `ed25519:${Buffer.from(x, 'base64url').toString('base64')}`;
}

export function decodePublicKey(text: string): KeyObject {
  const raw = Buffer.from(text.replace(/^ed25519:/, ''), 'base64');
  return createPublicKey({ key: { kty: 'OKP', crv: 'Ed25519', x: raw.toString('base64url') }, format: 'jwk' });
}

/** Makes a key pair for `operator`; refuses to overwrite an existing private key. */
export function generateOperatorKey(operator: string, dir: string): { privateKeyPath: string; publicKey: string } | { error: string } {
  const file = privateKeyFile(dir, operator);
  if (existsSync(file)) return { error: `a key for ${operator} already exists at ${file}; remove it first to make a new one` };
  mkdirSync(dir, { recursive: true, mode: 0o700 });
  chmodSync(dir, 0o700);
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  writeFileSync(file, privateKey.export({ format: 'pem', type: 'pkcs8' }), { mode: 0o600, flag: 'wx' });
  return { privateKeyPath: file, publicKey: encodePublicKey(publicKey) };
}

/** Loads an operator's private key; refuses keys others can read. */
export function loadOperatorKey(operator: string, dir: string): { key: KeyObject; publicKey: string } | { error: string } {
  const file = privateKeyFile(dir, operator);
  if (!existsSync(file)) return { error: `no private key for operator ${operator} in ${dir}: run \`airlock keygen --operator ${operator}\`` };
  if ((statSync(file).mode & 0o077) !== 0) return { error: `${file} is readable by others: chmod 600 it (or make a new key)` };
  const key = createPrivateKey(readFileSync(file));
  return { key, publicKey: encodePublicKey(createPublicKey(key)) };
}
