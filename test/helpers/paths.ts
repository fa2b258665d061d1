import { fileURLToPath } from 'node:url';
import { dirname, resolve } from 'node:path';

// Tests run from dist/test/...; the repository root is three levels above this compiled file.
const root = resolve(dirname(fileURLToPath(import.meta.url)), '../../..');

export const repoPath = (...parts: string[]): string => resolve(root, ...parts);
