// Unified text diffs of what a run changed, for a person reading `airlock show` or `airlock confirm`.
// Myers' O(ND) algorithm over lines, bounded: a file too large, not text, or too different to diff
// cheaply gets a one-line note instead (the run's hashes still say exactly what changed).

/** Files larger than this are not diffed (sizes and hashes are shown instead). */
export const TEXT_DIFF_MAX_BYTES = 512 * 1024;
/** Edit distance (lines) past which the diff is not computed. */
const MAX_EDITS = 4000;

/** Text: valid UTF-8 with no NUL byte. */
export function isText(b: Buffer): boolean {
  if (b.includes(0)) return false;
  try {
    new TextDecoder('utf-8', { fatal: true }).decode(b);
    return true;
  } catch {
    return false;
  }
}

type Op = { kind: ' ' | '-' | '+'; line: string };

/** The shortest edit script from `a` to `b` (lines), or null when it is longer than `maxEdits`. */
function editScript(a: string[], b: string[], maxEdits: number): Op[] | null {
  const n = a.length;
  const m = b.length;
  const max = Math.min(n + m, maxEdits);
  const off = max + 1;
  let v = new Int32Array(2 * max + 3);
  const trace: Int32Array[] = [];
  let found = -1;
  for (let d = 0; d <= max && found < 0; d++) {
    trace.push(v.slice());
    const next = v.slice();
    for (let k = -d; k <= d; k += 2) {
      let x = k === -d || (k !== d && (v[off + k - 1] as number) < (v[off + k + 1] as number)) ? (v[off + k + 1] as number) : (v[off + k - 1] as number) + 1;
      let y = x - k;
      while (x < n && y < m && a[x] === b[y]) {
        x++;
        y++;
      }
      next[off + k] = x;
      if (x >= n && y >= m) {
        found = d;
        break;
      }
    }
    v = next;
  }
  if (found < 0) return null;
  // Walk back through the saved frontiers.
  const ops: Op[] = [];
  let x = n;
  let y = m;
  for (let d = found; d > 0; d--) {
    const vd = trace[d] as Int32Array;
    const k = x - y;
    const down = k === -d || (k !== d && (vd[off + k - 1] as number) < (vd[off + k + 1] as number));
    const pk = down ? k + 1 : k - 1;
    const px = vd[off + pk] as number;
    const py = px - pk;
    while (x > px + (down ? 0 : 1) && y > py + (down ? 1 : 0)) {
      ops.push({ kind: ' ', line: a[--x] as string });
      y--;
    }
    if (down) ops.push({ kind: '+', line: b[--y] as string });
    else ops.push({ kind: '-', line: a[--x] as string });
  }
  while (x > 0 && y > 0) {
    ops.push({ kind: ' ', line: a[--x] as string });
    y--;
  }
  return ops.reverse();
}

const splitLines = (t: string): string[] => {
  if (t === '') return [];
  const lines = t.split('\n');
  if (lines[lines.length - 1] === '') lines.pop();
  else lines[lines.length - 1] += '\n\\ No newline at end of file';
  return lines;
};

/** A hunk's range as diff -u writes it: `start`, `start,count`, or the line before it for an empty side. */
const range = (start: number, count: number): string => (count === 1 ? `${start}` : count === 0 ? `${start - 1},0` : `${start},${count}`);

/**
 * A unified diff (`--- a`, `+++ b`, `@@` hunks with `context` lines around each change) of two texts;
 * '' when they are equal; null when they differ in more than a few thousand lines.
 */
export function unifiedDiff(before: string, after: string, names: { a: string; b: string }, context = 3): string | null {
  if (before === after) return '';
  const a = splitLines(before);
  const b = splitLines(after);
  const ops = editScript(a, b, MAX_EDITS);
  if (!ops) return null;
  const out = [`--- ${names.a}`, `+++ ${names.b}`];
  // Positions (1-based) of each op in a and b.
  let ai = 1;
  let bi = 1;
  const pos = ops.map((o) => {
    const p = { a: ai, b: bi };
    if (o.kind !== '+') ai++;
    if (o.kind !== '-') bi++;
    return p;
  });
  let i = 0;
  while (i < ops.length) {
    while (i < ops.length && ops[i]?.kind === ' ') i++;
    if (i >= ops.length) break;
    const start = Math.max(0, i - context);
    // Extend the hunk while the next change is within 2*context lines of the last one.
    let end = i;
    let j = i;
    while (j < ops.length) {
      if (ops[j]?.kind !== ' ') end = j;
      else if (j - end > 2 * context) break;
      j++;
    }
    const stop = Math.min(ops.length, end + context + 1);
    const hunk = ops.slice(start, stop);
    const p = pos[start] as { a: number; b: number };
    const aCount = hunk.filter((o) => o.kind !== '+').length;
    const bCount = hunk.filter((o) => o.kind !== '-').length;
    out.push(`@@ -${range(p.a, aCount)} +${range(p.b, bCount)} @@`);
    for (const o of hunk) out.push(`${o.kind}${o.line}`);
    i = stop;
  }
  return out.join('\n') + '\n';
}
