import { readdirSync, type Dirent } from 'node:fs';
import { join } from 'node:path';
import { literalPrefix, pathMatches, pathSegments } from '../../base/globs.js';
import type { FilePrimitive } from '../../action/action.js';

/**
 * The FILE_* and DIRECTORY_* actions, carried out inside the sandbox by fixed coreutils argv that
 * Airlock builds itself: no AI-provided code runs, and no shell parses anything.
 * Globs are expanded by the host against the real tree before the run (the overlay shows the same
 * tree to the sandbox), so the argv names every file it touches.
 */
export function primitiveArgv(op: FilePrimitive): { argv: string[]; stagedContent?: Buffer } {
  switch (op.op) {
    case 'delete': {
      const files = op.globs.flatMap(expandGlob);
      return { argv: files.length > 0 ? ['/usr/bin/rm', '-f', '--', ...new Set(files)] : ['/usr/bin/true'] };
    }
    case 'write':
      return { argv: ['/usr/bin/cp', '--', '/in/content', op.path], stagedContent: Buffer.from(op.contentBase64, 'base64') };
    case 'move':
      return { argv: ['/usr/bin/mv', '-T', '--', op.from, op.to] };
    case 'mkdir':
      return { argv: ['/usr/bin/mkdir', '--', op.path] };
    case 'rmdir':
      return { argv: ['/usr/bin/rm', '-r', '-f', '--', op.path] };
    case 'read':
      return { argv: ['/usr/bin/cat', '--', op.path] };
  }
}

/** Every existing non-directory path under the glob's literal prefix that the glob matches. */
export function expandGlob(glob: string): string[] {
  const prefix = '/' + literalPrefix(pathSegments(glob)).join('/');
  if (prefix === glob) return [glob];
  const out: string[] = [];
  const walk = (dir: string): void => {
    let entries: Dirent[];
    try {
      entries = readdirSync(dir, { withFileTypes: true });
    } catch {
      return;
    }
    for (const e of entries) {
      const p = join(dir, e.name);
      if (e.isDirectory()) walk(p);
      else if (pathMatches(glob, p)) out.push(p);
    }
  };
  walk(prefix);
  return out.sort();
}
