import { readFileSync } from 'node:fs';
import type { Problem, Result } from '../base/problem.js';
import { writeAtomic } from '../base/write-atomic.js';
import { verifyRegistration, type Registrant } from '../approval/tool-registration.js';
import { parseSubject, type AfterExecution } from '../contracts/utp.js';
import type { Policy } from '../policy/policy.js';
import type { ToolRecord } from '../store/types.js';
import { cancelSubject, checkToolRecord, type ToolOptions } from './tools.js';

/** A tool row as one worker sees it: its parsed options, who registered it, or why it is not run. */
export interface ToolEntry {
  record: ToolRecord;
  /** null: the row's options are invalid. */
  options: ToolOptions | null;
  /** Set when the worker will not run the tool: unsigned, signed by a key its policy does not list, changed since, rolled back, or no valid policy. */
  refused?: Problem[];
  registrant?: Registrant;
}

type Log = (level: 'info' | 'warn', event: string, fields: Record<string, unknown>) => void;

// A project id is one subject token (no '/'), so the first '/' splits the key.
const keyOf = (projectId: string, name: string): string => `${projectId}/${name}`;

/**
 * A worker's view of `resource.tools`. Every client can write the store, so a row is run only when
 * an operator that this worker's own policy.yaml trusts signed it as it stands; a refused row is
 * still subscribed to, so its calls are answered (auth_failed) rather than left to time out. When
 * the newest registration served per tool was signed is remembered in the worker's own workspace
 * (`memoryFile`, which clients cannot write): an older signed row put back in the store (one from
 * before `approval.required` was set, say) is refused as a rollback, after a restart too.
 */
export class ToolRegistry {
  private readonly entries = new Map<string, ToolEntry>();
  private readonly newest = new Map<string, number>();
  /** What was last logged per tool, so a refresh every few seconds does not repeat it. */
  private readonly reported = new Map<string, string>();
  private readonly after = new Map<string, AfterExecution>();
  /** The memory file's last problem, logged once (it is read at every refresh). */
  private memoryProblem = '';
  private readonly logMemory: Log = (level, event, fields) => {
    const what = String(fields.error);
    if (what === this.memoryProblem) return;
    this.memoryProblem = what;
    this.log(level, event, fields);
  };
  private subjectList: string[] = [];

  constructor(
    private readonly policy: () => Result<Policy>,
    private readonly log: Log,
    private readonly memoryFile: string,
  ) {
    this.readBack();
  }

  /** The subjects to consume: every tool's target_subject and its channel's cancel subject, sorted. */
  get subjects(): readonly string[] {
    return this.subjectList;
  }

  get servable(): number {
    return [...this.entries.values()].filter((e) => !e.refused && e.options).length;
  }

  afterExecutionFor(subject: string): AfterExecution | undefined {
    return this.after.get(subject);
  }

  get(projectId: string, name: string): ToolEntry | undefined {
    return this.entries.get(keyOf(projectId, name));
  }

  /** Replaces the view with the store's rows (a refresh). */
  replace(rows: readonly ToolRecord[]): void {
    const policy = this.policy();
    this.readBack();
    this.entries.clear();
    this.after.clear();
    const subjects = new Set<string>();
    for (const t of rows) {
      this.entries.set(keyOf(t.project_id, t.tool_name), this.judge(t, policy));
      const s = parseSubject(t.target_subject);
      if (!s.ok || s.value.kind !== 'tool') continue;
      subjects.add(t.target_subject);
      subjects.add(cancelSubject(s.value.ver, s.value.projectId, s.value.channelId));
      this.after.set(t.target_subject, t.after_execution);
    }
    this.subjectList = [...subjects].sort();
  }

  /** Adds one row read on demand (a tool registered since the last refresh). */
  add(t: ToolRecord): ToolEntry {
    this.readBack();
    const entry = this.judge(t, this.policy());
    this.entries.set(keyOf(t.project_id, t.tool_name), entry);
    return entry;
  }

  private judge(t: ToolRecord, policy: Result<Policy>): ToolEntry {
    const key = keyOf(t.project_id, t.tool_name);
    const checked = checkToolRecord(t);
    const entry: ToolEntry = { record: t, options: checked.ok ? checked.value.parsedOptions : null };
    // No valid policy, no trusted keys: every tool is refused, with the policy's own problems.
    const signed = policy.ok ? verifyRegistration(t, policy.value) : policy;
    if (!signed.ok) entry.refused = signed.problems;
    else if (signed.value.signedAt < (this.newest.get(key) ?? -Infinity)) {
      entry.refused = [{ code: 'UTPS_TOOL_ROLLBACK', message: `${t.project_id}/${t.tool_name} was signed at ${new Date(signed.value.signedAt).toISOString()}, before the registration this worker served (${new Date(this.newest.get(key) ?? 0).toISOString()}): an older registration was put back in the store`, path: 'signature' }];
    } else {
      if (signed.value.signedAt !== this.newest.get(key)) this.remember(key, signed.value.signedAt);
      entry.registrant = signed.value;
    }
    this.report(key, t, entry, checked.ok ? [] : checked.problems);
    return entry;
  }

  /**
   * Takes in what other workers of this workspace served since (before every judgement, not only at
   * start): a row another worker has seen replaced is a rollback here too, though this worker never
   * saw the newer one (a client can put the older row back between two of its refreshes).
   */
  private readBack(): void {
    for (const [k, v] of Object.entries(readMemory(this.memoryFile, this.logMemory))) this.newest.set(k, Math.max(v, this.newest.get(k) ?? -Infinity));
  }

  /** Records a newer registration, merged with what other workers of this workspace wrote meanwhile. */
  private remember(key: string, signedAt: number): void {
    this.newest.set(key, signedAt);
    const merged = readMemory(this.memoryFile, this.logMemory);
    for (const [k, v] of this.newest) merged[k] = Math.max(v, merged[k] ?? -Infinity);
    for (const [k, v] of Object.entries(merged)) this.newest.set(k, v);
    try {
      writeAtomic(this.memoryFile, JSON.stringify(merged) + '\n');
    } catch (e) {
      this.log('warn', 'registrations-memory-failed', { file: this.memoryFile, error: (e as Error).message });
    }
  }

  private report(key: string, t: ToolRecord, e: ToolEntry, invalid: Problem[]): void {
    const what = e.refused ? `refused ${e.refused.map((p) => p.code).join(',')}` : invalid.length > 0 ? `invalid ${invalid.map((p) => p.code).join(',')}` : `ok ${e.registrant?.operator} ${e.registrant?.signedAt}`;
    if (this.reported.get(key) === what) return;
    this.reported.set(key, what);
    const ids = { project_id: t.project_id, tool_name: t.tool_name };
    if (e.refused) this.log('warn', 'tool-refused', { ...ids, problems: e.refused });
    else if (invalid.length > 0) this.log('warn', 'tool-invalid', { ...ids, problems: invalid });
    else if (e.registrant) this.log('info', 'tool-registered', { ...ids, operator: e.registrant.operator, key_id: e.registrant.keyId, signed_utc: new Date(e.registrant.signedAt).toISOString() });
  }
}

/** The rollback memory: `{ "<project>/<tool>": signed at (ms) }`; empty when missing, logged when unreadable. */
function readMemory(file: string, log: Log): Record<string, number> {
  let text: string;
  try {
    text = readFileSync(file, 'utf8');
  } catch (e) {
    if ((e as NodeJS.ErrnoException).code !== 'ENOENT') log('warn', 'registrations-memory-unreadable', { file, error: (e as Error).message });
    return {};
  }
  try {
    const o = JSON.parse(text) as unknown;
    if (o === null || typeof o !== 'object' || Array.isArray(o)) throw new Error('not a JSON object');
    return Object.fromEntries(Object.entries(o).filter((e): e is [string, number] => typeof e[1] === 'number' && Number.isFinite(e[1])));
  } catch (e) {
    log('warn', 'registrations-memory-unreadable', { file, error: (e as Error).message });
    return {};
  }
}
