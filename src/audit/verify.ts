import { parseRecordLine } from './canonical.js';
import type { RawLine } from './files.js';
import { headSeal, recordSeal, sealMatches, type SealKey } from './seal.js';
import { GENESIS_HASH, type AuditAnchor, type AuditHead, type AuditProblem, type AuditRecord, type VerifyReport } from './types.js';

/**
 * Verification of a whole log: pure over the lines, the head file and the anchor file, so it is
 * tested without a file system and the same code runs for `airlock audit verify` and prune.
 *
 * Steps: (1) each line on its own (JSON, structure, canonical form, own hash); (2) order in the file
 * (duplicates, reordering: the records outside the longest increasing run of seqs are the moved
 * ones); (3) the chain in seq order from the anchor (gaps are removed records, a wrong `prev` is an
 * edited and re-hashed record); (4) the anchor is recorded by a `pruned` record; (5) the head file
 * matches the last record (a head beyond the last record is a truncated tail); (6) the seals: every
 * record after the first sealed one, and the head, carry a seal that verifies with the host's key.
 */

type Small<T> = { state: 'missing' } | { state: 'bad'; message: string } | { state: 'ok'; value: T };

interface Entry {
  line: number;
  seq: number;
  hash: string;
  prev: string;
  seal?: string;
  /** For `pruned` records: the anchor they announce. */
  prunedTo?: { seq: number; hash: string };
}

export interface VerifyInput {
  file: string;
  lines: Iterable<RawLine>;
  head: Small<AuditHead>;
  anchor: Small<AuditAnchor>;
  /** The host's seal key (null: none on this host, so seals cannot be checked). */
  key: SealKey | null;
  /** Called with every well-formed record (show and prune reuse the single pass). */
  onRecord?: (r: AuditRecord, raw: RawLine) => void;
}

const decoder = new TextDecoder('utf-8', { fatal: true });

const range = (a: number, b: number) => (a === b ? `seq ${a}` : `seqs ${a}..${b}`);

export function verifyLines(input: VerifyInput): VerifyReport {
  const problems: AuditProblem[] = [];
  const entries: Entry[] = [];
  /** Complete lines that are not a usable record (bad JSON, bad structure, edited): each may stand in for a missing seq. */
  const badLines: number[] = [];
  let lastLineNo = 0;

  // (1) Each line on its own.
  for (const raw of input.lines) {
    lastLineNo = raw.line;
    if (!raw.terminated) {
      problems.push({
        code: 'AUDIT_PARTIAL_LINE',
        line: raw.line,
        message: `line ${raw.line} is an incomplete record (${raw.bytes.length} bytes, no newline): an append was interrupted. Run \`airlock audit verify --repair\` to move it to a quarantine file beside the log; appends are refused until then`,
      });
      // Not a stand-in for any seq: the head is only written after a complete line.
      continue;
    }
    if (raw.tooLong) {
      problems.push({ code: 'AUDIT_BAD_RECORD', line: raw.line, message: `line ${raw.line} is longer than any record the log writes` });
      badLines.push(raw.line);
      continue;
    }
    let text: string;
    try {
      text = decoder.decode(raw.bytes);
    } catch {
      problems.push({ code: 'AUDIT_BAD_JSON', line: raw.line, message: `line ${raw.line} is not UTF-8 text` });
      badLines.push(raw.line);
      continue;
    }
    const p = parseRecordLine(text);
    if (!('record' in p)) {
      const seq = seqHint(text);
      problems.push({ code: p.code, line: raw.line, ...(seq !== undefined ? { seq } : {}), message: `line ${raw.line}${seq !== undefined ? ` (seq ${seq})` : ''}: ${p.message}` });
      badLines.push(raw.line);
      continue;
    }
    const r = p.record;
    const e: Entry = { line: raw.line, seq: r.seq, hash: r.hash, prev: r.prev, ...(r.seal ? { seal: r.seal } : {}) };
    if (r.type === 'pruned' && r.detail && typeof r.detail.to_seq === 'number' && typeof r.detail.to_hash === 'string') {
      e.prunedTo = { seq: r.detail.to_seq, hash: r.detail.to_hash };
    }
    entries.push(e);
    input.onRecord?.(r, raw);
  }

  // (2) Order in the file.
  const bySeq = new Map<number, Entry>();
  const unique: Entry[] = [];
  for (const e of entries) {
    const first = bySeq.get(e.seq);
    if (first) {
      problems.push({ code: 'AUDIT_DUPLICATE', line: e.line, seq: e.seq, message: `line ${e.line}: record seq ${e.seq} appears a second time (first at line ${first.line}): a record was copied or inserted` });
      continue;
    }
    bySeq.set(e.seq, e);
    unique.push(e);
  }
  const inOrder = longestIncreasing(unique);
  const sorted = [...unique].sort((a, b) => a.seq - b.seq);
  const sortedIndex = new Map(sorted.map((e, i) => [e, i] as const));
  for (const e of unique) {
    if (inOrder.has(e)) continue;
    const i = sortedIndex.get(e)!;
    const before = sorted[i - 1];
    const where = before ? `it belongs after seq ${before.seq} (line ${before.line})` : 'it belongs at the start';
    problems.push({ code: 'AUDIT_REORDERED', line: e.line, seq: e.seq, message: `line ${e.line}: record seq ${e.seq} is out of order, ${where}: records were moved` });
  }

  // (3) The chain, in seq order, from the anchor (or the genesis).
  const anchor = input.anchor.state === 'ok' ? input.anchor.value : undefined;
  if (input.anchor.state === 'bad') {
    problems.push({ code: 'AUDIT_ANCHOR_BAD', line: 1, message: `the anchor file is ${input.anchor.message}: the start of the chain cannot be checked` });
  }
  // A prune interrupted after writing its anchor leaves the pruned records in place: check them from the anchor before it.
  const pending = anchor !== undefined && sorted.length > 0 && sorted[0]!.seq <= anchor.seq;
  const start = !anchor ? { seq: 0, hash: GENESIS_HASH } : pending ? (anchor.previous ?? { seq: 0, hash: GENESIS_HASH }) : { seq: anchor.seq, hash: anchor.hash };
  let expected = start.seq + 1;
  let prevHash: string | undefined = input.anchor.state === 'bad' ? undefined : start.hash;
  let prevEntry: Entry | undefined;
  for (const e of sorted) {
    if (e.seq < expected) {
      // Only possible for records before the anchor when no prune is pending.
      problems.push({ code: 'AUDIT_ANCHOR_MISMATCH', line: e.line, seq: e.seq, message: `line ${e.line}: record seq ${e.seq} is before the anchor (seq ${start.seq}) the log was pruned to` });
      continue;
    }
    if (e.seq > expected) {
      const after = prevEntry ? prevEntry.line : 0;
      const standIns = badLines.filter((l) => l > after && l < e.line).length;
      if (standIns < e.seq - expected) {
        const where = prevEntry ? `between seq ${prevEntry.seq} (line ${prevEntry.line}) and seq ${e.seq} (line ${e.line})` : `before seq ${e.seq} (line ${e.line}), at the start of the log`;
        problems.push({ code: 'AUDIT_REMOVED', line: e.line, seq: expected, message: `record ${range(expected, e.seq - 1)} ${e.seq - expected === 1 ? 'is' : 'are'} missing ${where}: records were removed` });
      }
      prevHash = undefined; // the link over a gap cannot be checked
    }
    if (prevHash !== undefined && e.prev !== prevHash) {
      if (prevEntry) {
        problems.push({
          code: 'AUDIT_EDITED',
          line: prevEntry.line,
          seq: prevEntry.seq,
          message: `line ${prevEntry.line}: record seq ${prevEntry.seq} is not the record that seq ${e.seq} (line ${e.line}) chained to: it was edited and re-hashed (or seq ${e.seq}'s prev was changed)`,
        });
      } else if (anchor) {
        problems.push({ code: 'AUDIT_ANCHOR_MISMATCH', line: e.line, seq: e.seq, message: `line ${e.line}: the first record (seq ${e.seq}) does not continue from the anchor (seq ${start.seq}): the anchor file or the record was changed` });
      } else {
        problems.push({ code: 'AUDIT_EDITED', line: e.line, seq: e.seq, message: `line ${e.line}: record seq ${e.seq} does not start the chain (its prev is not the genesis hash): it was edited and re-hashed` });
      }
    }
    if (pending && anchor && e.seq === anchor.seq && e.hash !== anchor.hash) {
      problems.push({ code: 'AUDIT_ANCHOR_MISMATCH', line: e.line, seq: e.seq, message: `line ${e.line}: record seq ${e.seq} is not the record the anchor file names` });
    }
    prevHash = e.hash;
    expected = e.seq + 1;
    prevEntry = e;
  }

  // (4) A prune leaves a `pruned` record naming its anchor; an anchor nobody recorded means the start was cut by hand.
  if (anchor && !pending && !unique.some((e) => e.prunedTo?.seq === anchor.seq && e.prunedTo.hash === anchor.hash)) {
    problems.push({
      code: 'AUDIT_ANCHOR_UNRECORDED',
      line: 1,
      message: `the anchor file says records up to seq ${anchor.seq} were pruned, but no \`pruned\` record in the log says so: the start of the log was removed outside \`prune\`, or that record was removed`,
    });
  }

  // (5) The head file.
  const last = sorted[sorted.length - 1];
  const after = lastLineNo + 1;
  const floor = anchor?.seq ?? 0;
  if (input.head.state === 'missing') {
    if (last) problems.push({ code: 'AUDIT_HEAD_MISSING', line: after, message: 'the head file is missing, so a truncated tail cannot be ruled out: it was deleted (appends are refused until a person checks the log)' });
    else if (anchor) problems.push({ code: 'AUDIT_TRUNCATED', line: 1, seq: anchor.seq + 1, message: `the log was pruned to seq ${anchor.seq} but holds no record now (not even the \`pruned\` record): it was emptied` });
  } else if (input.head.state === 'bad') {
    problems.push({ code: 'AUDIT_HEAD_BAD', line: after, message: `the head file is ${input.head.message}: a truncated tail cannot be ruled out` });
  } else {
    const head = input.head.value;
    // Unreadable lines after the last good record may be the records up to the head: they are reported already.
    const top = (last?.seq ?? floor) + badLines.filter((l) => l > (last?.line ?? 0)).length;
    if (head.seq > top) {
      problems.push({
        code: 'AUDIT_TRUNCATED',
        line: after,
        seq: top + 1,
        message: `the head file says the log reached seq ${head.seq} but ${last ? `the last record is seq ${last.seq} (line ${last.line})` : 'it holds no record'}: ${range(top + 1, head.seq)} ${head.seq - top === 1 ? 'was' : 'were'} cut from the end`,
      });
    } else if (last && head.seq === last.seq && head.hash !== last.hash) {
      problems.push({ code: 'AUDIT_EDITED', line: last.line, seq: last.seq, message: `line ${last.line}: the last record (seq ${last.seq}) is not the one the head file recorded: it was edited and re-hashed, or replaced` });
    } else if (last && head.seq < last.seq && !(head.seq === last.seq - 1 && head.hash === last.prev)) {
      // One behind with a matching link is a crash between writing the line and the head: fine.
      problems.push({
        code: 'AUDIT_HEAD_MISMATCH',
        line: last.line,
        seq: head.seq + 1,
        message: `the head file says the last record is seq ${head.seq} but the log continues to seq ${last.seq}: records were added without the log's append, or the head file was replaced by an older copy`,
      });
    }
  }

  const seals = checkSeals(entries, input, problems, after);
  return {
    ok: problems.length === 0,
    file: input.file,
    records: entries.length,
    seals,
    ...(sorted.length > 0 ? { firstSeq: sorted[0]!.seq, lastSeq: last!.seq } : {}),
    ...(anchor ? { anchor: { seq: anchor.seq, hash: anchor.hash, pruned_total: anchor.pruned_total } } : {}),
    problems: problems.sort((a, b) => a.line - b.line),
  };
}

/**
 * (6) Seals. Records written before the log had seals carry none: they may only come before the
 * first sealed record. Every record after it, and the head file, must carry a seal that verifies
 * with the host's key; an unsealed or wrongly sealed one was added or rewritten by someone who
 * could write the log but not read the key.
 */
function checkSeals(entries: Entry[], input: VerifyInput, problems: AuditProblem[], after: number): NonNullable<VerifyReport['seals']> {
  const firstSealed = entries.findIndex((e) => e.seal !== undefined);
  const headSealed = input.head.state === 'ok' && input.head.value.seal !== undefined;
  const out = { key_id: input.key?.id ?? null, sealed: entries.filter((e) => e.seal !== undefined).length, unsealed_before_seals: firstSealed === -1 ? (headSealed ? 0 : entries.length) : firstSealed };
  if (firstSealed === -1 && !headSealed) return out; // a log from before seals: nothing to check
  if (!input.key) {
    problems.push({ code: 'AUDIT_SEAL_KEY_MISSING', line: 1, message: `the log is sealed but this host has no seal key (${'AIRLOCK_AUDIT_KEY or ~/.config/airlock/audit-seal.key'}): its seals cannot be checked` });
    return out;
  }
  const key = input.key;
  for (const e of entries.slice(firstSealed === -1 ? 0 : firstSealed)) {
    if (e.seal === undefined) problems.push({ code: 'AUDIT_UNSEALED', line: e.line, seq: e.seq, message: `line ${e.line}: record seq ${e.seq} has no seal where every record is sealed: it was added without the log's append (the host key)` });
    else if (!sealMatches(recordSeal(key, e.hash), e.seal)) problems.push({ code: 'AUDIT_UNSEALED', line: e.line, seq: e.seq, message: `line ${e.line}: the seal of record seq ${e.seq} does not verify with this host's key (${key.id}): it was added or rewritten without it` });
  }
  if (input.head.state === 'ok') {
    const h = input.head.value;
    if (h.seal === undefined || !sealMatches(headSeal(key, h.seq, h.hash), h.seal)) {
      problems.push({ code: 'AUDIT_UNSEALED', line: after, message: `the head file (seq ${h.seq}) ${h.seal === undefined ? 'has no seal' : `has a seal that does not verify with this host's key (${key.id})`}: it was written without the log's append` });
    }
  }
  return out;
}

/** The seq of a line that is not a valid record, if one can still be read (to name the record in the problem). */
function seqHint(text: string): number | undefined {
  const m = /"seq":(\d{1,15})[,}]/.exec(text.slice(0, 4096));
  return m ? Number(m[1]) : undefined;
}

/** The entries on one longest run of increasing seqs in file order (patience sorting, O(n log n)). */
function longestIncreasing(list: Entry[]): Set<Entry> {
  const tails: number[] = []; // index into list of the smallest tail of each length
  const back: number[] = new Array<number>(list.length).fill(-1);
  for (let i = 0; i < list.length; i++) {
    const s = list[i]!.seq;
    let lo = 0;
    let hi = tails.length;
    while (lo < hi) {
      const mid = (lo + hi) >> 1;
      if (list[tails[mid]!]!.seq < s) lo = mid + 1;
      else hi = mid;
    }
    if (lo > 0) back[i] = tails[lo - 1]!;
    tails[lo] = i;
  }
  const keep = new Set<Entry>();
  for (let i = tails.length > 0 ? tails[tails.length - 1]! : -1; i !== -1; i = back[i]!) keep.add(list[i]!);
  return keep;
}
