import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

/** One of Airlock's native helpers under dist/native (scripts/build-native.mjs): above this module (tsc output) or above the bundle; null when not built. */
export function nativeBinaryPath(name: 'airlock-tracer' | 'airlock-scopefs' | 'airlock-exec'): string | null {
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++, dir = dirname(dir)) {
    const p = join(dir, 'native', name);
    if (existsSync(p)) return p;
  }
  return null;
}
