import { existsSync } from 'node:fs';
import { dirname, join } from 'node:path';
import { fileURLToPath } from 'node:url';

type NativeName = 'airlock-tracer' | 'airlock-scopefs' | 'airlock-exec' | 'airlock-idmap';
// A helper found stays where it is for the process's life (every scoped run asks for the scope
// agent's); one not found is looked for again, so a build made meanwhile is seen.
const found = new Map<NativeName, string>();

/** One of Airlock's native helpers under dist/native (scripts/build-native.mjs): above this module (tsc output) or above the bundle; null when not built. */
export function nativeBinaryPath(name: NativeName): string | null {
  const known = found.get(name);
  if (known !== undefined) return known;
  let dir = dirname(fileURLToPath(import.meta.url));
  for (let i = 0; i < 5; i++, dir = dirname(dir)) {
    const p = join(dir, 'native', name);
    if (existsSync(p)) {
      found.set(name, p);
      return p;
    }
  }
  return null;
}
