// Airlock's path globs: the syntax of scope and effect patterns and the containment checks the judge,
// the lanes and the documents share. Pure and bounded: a hostile pattern or name cannot make it blow up.
/**
 * Glob syntax in effects (and in scope when recursive): `*` and `?` within one segment, `[...]`
 * classes, and `**` as a whole segment for any depth (zero or more segments). Wildcards never match
 * a segment that starts with `.` unless the pattern segment itself starts with `.`, so `/p/out/*`
 * does not cover `/p/out/.bashrc`. Braces are refused (ambiguous; no shell expands them here).
 */
export const MAX_PATH_SEGMENTS = 32;
/** `**` segments per pattern (bounds the matching work: a hostile pattern cannot make it quadratic). */
export const MAX_DEEP_WILDCARDS = 2;

export const hasWildcard = (s: string): boolean => /[*?[\]]/.test(s);
export const pathSegments = (p: string): string[] => p.split('/').filter((s) => s !== '');
/** The segments before the first one with a wildcard. */
export const literalPrefix = (segs: readonly string[]): string[] => {
  const i = segs.findIndex(hasWildcard);
  return i < 0 ? [...segs] : segs.slice(0, i);
};

/** Why `path` is not an absolute, normalised path, or null when it is. */
export function checkAbsolutePath(path: string, opts: { wildcards?: boolean } = {}): string | null {
  if (path === '') return 'is empty';
  if (path.startsWith('~')) return 'starts with `~` (home is implicit scope): write the absolute path';
  if (!path.startsWith('/')) return 'is relative: write an absolute path starting with `/`';
  if (path.length > 4096) return 'is longer than 4096 characters';
  // eslint-disable-next-line no-control-regex
  if (/[\u0000-\u001f\u007f]/.test(path)) return 'contains control characters';
  if (path.includes('\\')) return 'contains a backslash';
  if (path !== '/' && path.endsWith('/')) return 'ends with `/`: remove the trailing slash';
  if (path.includes('//')) return 'has an empty segment (`//`)';
  const segs = pathSegments(path);
  if (segs.length > MAX_PATH_SEGMENTS) return `has more than ${MAX_PATH_SEGMENTS} segments`;
  if (segs.some((s) => s === '.' || s === '..')) return 'has a `.` or `..` segment: write the normalised path';
  if (/[{}]/.test(path)) return 'uses braces, which Airlock globs do not support: list each path';
  if (opts.wildcards === false && hasWildcard(path)) return 'has a wildcard where one exact path is needed';
  if (segs.filter((s) => s === '**').length > MAX_DEEP_WILDCARDS) return `uses \`**\` more than ${MAX_DEEP_WILDCARDS} times`;
  for (const s of segs) {
    if (s.includes('**') && s !== '**') return 'uses `**` inside a segment: `**` must be a whole segment';
    if (!balancedClasses(s)) return 'has an unbalanced `[` or `]`';
  }
  return null;
}

function balancedClasses(seg: string): boolean {
  let open = false;
  for (const c of seg) {
    if (c === '[') {
      if (open) return false;
      open = true;
    } else if (c === ']') {
      if (!open) return false;
      open = false;
    }
  }
  return !open;
}

type GlobToken = { kind: 'char'; ch: string } | { kind: 'any' } | { kind: 'star' } | { kind: 'class'; negate: boolean; body: string };

const tokenCache = new Map<string, GlobToken[]>();
function globTokens(glob: string): GlobToken[] {
  let toks = tokenCache.get(glob);
  if (toks) return toks;
  toks = [];
  for (let i = 0; i < glob.length; i++) {
    const c = glob[i] as string;
    const close = c === '[' ? glob.indexOf(']', i + 1) : -1;
    if (c === '*') toks.push({ kind: 'star' });
    else if (c === '?') toks.push({ kind: 'any' });
    else if (close > i + 1) {
      // (an unclosed or empty `[` is taken literally: unchecked input must never loop)
      let body = glob.slice(i + 1, close);
      const negate = body.startsWith('!') || body.startsWith('^');
      if (negate) body = body.slice(1);
      toks.push({ kind: 'class', negate, body });
      i = close;
    } else toks.push({ kind: 'char', ch: c });
  }
  if (tokenCache.size > 1000) tokenCache.clear();
  tokenCache.set(glob, toks);
  return toks;
}

function classHas(body: string, ch: string): boolean {
  for (let i = 0; i < body.length; i++) {
    if (body[i + 1] === '-' && i + 2 < body.length) {
      if (ch >= (body[i] as string) && ch <= (body[i + 2] as string)) return true;
      i += 2;
    } else if (body[i] === ch) return true;
  }
  return false;
}

const matchOne = (t: GlobToken, ch: string): boolean =>
  t.kind === 'any' || (t.kind === 'char' && t.ch === ch) || (t.kind === 'class' && classHas(t.body, ch) !== t.negate);

/**
 * Does the glob segment match the name? Iterative wildcard matching (backtracks only to the last
 * `*`): O(glob x name) at worst, so a hostile name or pattern cannot blow it up as a regex could.
 */
function segMatch(glob: string, name: string): boolean {
  const toks = globTokens(glob);
  let g = 0;
  let n = 0;
  let starG = -1;
  let starN = 0;
  while (n < name.length) {
    const t = toks[g];
    if (t && t.kind !== 'star' && matchOne(t, name[n] as string)) {
      g++;
      n++;
    } else if (t && t.kind === 'star') {
      starG = g++;
      starN = n;
    } else if (starG >= 0) {
      g = starG + 1;
      n = ++starN;
    } else return false;
  }
  while (toks[g]?.kind === 'star') g++;
  return g === toks.length;
}

// Internal segment tokens for "any name, dot-names included" (what a scope's `recursive` covers);
// they contain a NUL, which no checked path can.
const ANY1 = '\u0000*';
const ANYN = '\u0000**';
const isDeep = (x: string): boolean => x === '**' || x === ANYN;

/** Does glob segment `s` match every name that segment `e` (literal or glob) matches? */
function segmentCovers(s: string, e: string): boolean {
  if (s === ANY1) return true;
  if (e === ANY1) return false;
  if (!hasWildcard(s)) return s === e;
  if (e.startsWith('.') && !s.startsWith('.')) return false;
  if (!hasWildcard(e)) return segMatch(s, e);
  return s === '*' || s === e;
}

/** Can the deep segment `s` (`**` or ANYN) absorb E's segment `e`? */
const absorbs = (s: string, e: string): boolean => s === ANYN || !(e.startsWith('.') || e === ANY1 || e === ANYN);

/** Pattern containment: every path pattern E matches is matched by pattern S (sound, conservative). */
function patternCovers(S: readonly string[], E: readonly string[]): boolean {
  // Declared patterns are at most MAX_PATH_SEGMENTS deep; observed paths may be deeper (fail closed past 256).
  if (S.length > 256 || E.length > 256) return false;
  // 0 = unknown, 1 = false, 2 = true.
  const memo = new Uint8Array((S.length + 1) * (E.length + 1));
  const m = (i: number, j: number): boolean => {
    const key = i * (E.length + 1) + j;
    const known = memo[key];
    if (known) return known === 2;
    let out: boolean;
    const s = S[i];
    const e = E[j];
    if (s === undefined) out = e === undefined;
    else if (isDeep(s)) out = m(i + 1, j) || (e !== undefined && absorbs(s, e) && m(i, j + 1));
    else if (e === undefined || isDeep(e)) out = false;
    else out = segmentCovers(s, e) && m(i + 1, j + 1);
    memo[key] = out ? 2 : 1;
    return out;
  };
  return m(0, 0);
}

/** A covered area: the pattern alone, it and its direct entries, or it and everything below. */
export interface PathCover {
  pattern: string;
  mode: 'exact' | 'children' | 'subtree';
}

const expand = (segs: string[], mode: PathCover['mode']): string[][] =>
  mode === 'exact' ? [segs] : mode === 'children' ? [segs, [...segs, ANY1]] : [[...segs, ANYN]];

/** Does `cover` include every path `path` (a literal path or a glob, taken with `pathMode`) stands for? */
export function globWithin(cover: PathCover, path: string, pathMode: PathCover['mode'] = 'exact'): boolean {
  const covers = expand(segmentsOf(cover.pattern), cover.mode);
  return expand(segmentsOf(path), pathMode).every((e) => covers.some((s) => patternCovers(s, e)));
}
// The same scope and effect paths are split again and again: split each once.
const segCache = new Map<string, string[]>();
function segmentsOf(path: string): string[] {
  let segs = segCache.get(path);
  if (!segs) {
    segs = pathSegments(path);
    if (segCache.size > 10_000) segCache.clear();
    segCache.set(path, segs);
  }
  return segs;
}

/** Does the glob `pattern` match the literal absolute `path`? */
export const pathMatches = (pattern: string, path: string): boolean => globWithin({ pattern, mode: 'exact' }, path);

/**
 * Whether a deletion is declared: its path matches a delete effect, or it lies inside a directory
 * whose own deletion, in the same diff, is declared (deleting a directory deletes what it holds).
 */
export function deletionDeclared(patterns: readonly string[], path: string, deleted: ReadonlySet<string>): boolean {
  if (patterns.some((p) => pathMatches(p, path))) return true;
  for (let a = path.slice(0, path.lastIndexOf('/')); a.length > 0; a = a.slice(0, a.lastIndexOf('/'))) {
    if (deleted.has(a) && patterns.some((p) => pathMatches(p, a))) return true;
  }
  return false;
}
