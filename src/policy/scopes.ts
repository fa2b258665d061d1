import { lstatSync, readlinkSync } from 'node:fs';
import { join, normalize } from 'node:path';
import { scopeHostPath, type Action } from '../action/action.js';
import { fuseMountOver, fuseMounts } from '../base/mountinfo.js';
import type { Problem } from '../base/problem.js';

export const scopeRules = [
  { code: 'POLICY_SCOPE_ROOT', spec: 'Issue 15: an action may act only under the folders policy.yaml lists in scope_roots (an allowlist; empty by default, so a fresh workspace allows no scope at all).', fix: 'Scope the action to a folder under one of the roots, or have the operator add a root to scope_roots in policy.yaml.' },
  { code: 'POLICY_SCOPE_LINK', spec: 'Issue 15: a scope\'s path is the real path: no component of it may be a symbolic link (the resolved path must equal the declared one).', fix: 'Declare the real path (what `realpath` prints) instead of one that goes through a link.' },
  { code: 'POLICY_SCOPE_FUSE', spec: 'Airlock: a scope is never on a FUSE file system: a process (often a user\'s) answers for it and may never answer, and the host would wait on it forever (looking at the scope, staging it, promoting).', fix: 'Copy the files to a folder on a local file system and scope the action to that.' },
  { code: 'POLICY_SCOPE_MISSING', spec: 'A scope must exist before the action runs (its copy-on-write view is made from it).', fix: 'Create the folder (or file) first, or scope the action to one that exists.' },
] as const;

const under = (path: string, root: string): boolean => path === root || path.startsWith(`${root}/`);

/** Whether `path` lies under one of the policy's scope_roots (null: no policy was read, so none). */
export const underScopeRoot = (path: string, roots: readonly string[] | null): boolean => roots?.some((r) => under(path, r)) ?? false;

/**
 * Every scope of the action lies under a root the policy allows and is its own real path. `roots`
 * null: no policy was read, and no scope is allowed (fail closed). Checked before anything runs;
 * the scope agent enforces the no-link rule again when it opens the scope.
 */
export function checkScopes(action: Action, roots: readonly string[] | null): Problem[] {
  const problems: Problem[] = [];
  const rootList = roots === null ? 'no policy was read' : roots.length === 0 ? 'none' : roots.join(', ');
  for (const [i, declared] of action.scope.paths.entries()) {
    const path = scopeHostPath(declared);
    const at = `scope.filesystem.paths.${i}`;
    if (!underScopeRoot(path, roots)) {
      problems.push({ code: 'POLICY_SCOPE_ROOT', message: `scope ${path} is outside every folder the host policy lets actions act in (rule scope_roots: ${rootList}); nothing ran`, path: at });
      continue;
    }
    const way = wayProblem(path, at);
    if (way) problems.push(way);
  }
  return problems;
}

/**
 * Why the way to `path` is refused: a component on a FUSE mount, a symbolic link, or missing. Walked
 * one component at a time without following anything, and the mount table is asked before each step,
 * so no FUSE file system is ever touched (realpath would wait on one that does not answer). Whoever
 * stats a scope path before the policy (exec's --rw check) asks this first: a stat that follows a
 * link into a FUSE mount waits as realpath would.
 */
export function wayProblem(path: string, at: string): Problem | null {
  const parts = path.split('/').filter(Boolean);
  if (!path.startsWith('/') || normalize(path) !== path || parts.some((c) => c === '.' || c === '..') || (path !== '/' && path.endsWith('/'))) {
    return { code: 'POLICY_SCOPE_LINK', message: `scope ${path} is not written as its own real path (an absolute path without ".", ".." or a doubled or trailing slash); nothing ran`, path: at };
  }
  const fuse = fuseMounts();
  let p = '/';
  for (const part of ['', ...parts]) {
    p = join(p, part);
    const on = fuseMountOver(p, fuse);
    if (on) return { code: 'POLICY_SCOPE_FUSE', message: `scope ${path} is on a FUSE file system (${on.fsType} mounted at ${on.mountPoint}): a process answers for it and may never answer; nothing ran`, path: at };
    try {
      if (lstatSync(p).isSymbolicLink()) return { code: 'POLICY_SCOPE_LINK', message: `scope ${path} goes through a symbolic link (${p} -> ${readlinkSync(p)}) (rule: a scope is its own real path); nothing ran`, path: at };
    } catch (e) {
      const code = (e as NodeJS.ErrnoException).code;
      return code === 'ENOENT' ? { code: 'POLICY_SCOPE_MISSING', message: `scope ${path} does not exist; nothing ran`, path: at } : { code: 'POLICY_SCOPE_LINK', message: `scope ${path} cannot be resolved (${code} at ${p}); nothing ran`, path: at };
    }
  }
  return null;
}
