// A path walked one component at a time, links followed the way the kernel follows them, so a check
// can look at each step before and after the walk touches it.
import { lstatSync, readlinkSync, type Stats } from 'node:fs';
import { dirname, isAbsolute, join, sep } from 'node:path';

const MAX_LINKS = 40; // the kernel's own limit on links in one path

export interface PathWalk {
  /** Asked before a path is first touched (lstat); a reason stops the walk there. */
  before?(p: string): string | null;
  /** Asked for every folder reached (the root first) and for the end of the walk; a reason stops it. */
  reached?(p: string, st: Stats): string | null;
}

/**
 * Walks `path` (absolute) as the kernel resolves it and returns the first reason a hook gave, or
 * null. A link's target takes its place in the walk as written (never normalized as a string: `x/..`
 * after a link `x` is the parent of x's target, not the folder holding x), and ".." is the parent of
 * the folder reached so far. A component that does not exist ends the walk with null.
 */
export function walkPath(path: string, hooks: PathWalk): string | null {
  const todo = path.split(sep).filter(Boolean);
  let links = 0;
  let at = '/';
  for (;;) {
    const stop = hooks.before?.(at) ?? hooks.reached?.(at, lstatSync(at)) ?? null;
    if (stop) return stop;
    const part = todo.shift();
    if (part === undefined) return null;
    if (part === '.') continue;
    if (part === '..') {
      at = dirname(at); // `at` is a folder reached without a link left in it: its parent is the real one
      continue;
    }
    const next = join(at, part);
    const before = hooks.before?.(next);
    if (before) return before;
    let nst: Stats;
    try {
      nst = lstatSync(next);
    } catch {
      return null;
    }
    if (nst.isSymbolicLink()) {
      if (++links > MAX_LINKS) return `too many links on the way to ${path}`;
      const target = readlinkSync(next);
      todo.unshift(...target.split(sep).filter(Boolean));
      if (isAbsolute(target)) at = '/';
      continue;
    }
    at = next;
  }
}
