import { existsSync, readdirSync, readFileSync } from 'node:fs';
import { join } from 'node:path';
import type { Workspace } from '../workspace/workspace.js';
import { Ledger } from './ledger.js';

export interface GateStatus {
  waiting: string[];
  running: string[];
  accepted: string[];
  quarantined: { file: string; codes: string[] }[];
  interrupted: string[];
}

const list = (dir: string, pred: (n: string) => boolean) => (existsSync(dir) ? readdirSync(dir).filter(pred).sort() : []);

/** What is waiting, running, accepted and quarantined in a workspace. */
export function gateStatus(ws: Workspace): GateStatus {
  const md = (n: string) => n.endsWith('.md') && !n.startsWith('.');
  const quarantined = list(ws.quarantine, md).map((file) => {
    let codes: string[];
    try {
      const r = JSON.parse(readFileSync(join(ws.quarantine, `${file}.reasons.json`), 'utf8')) as { problems?: { code: string }[] };
      codes = [...new Set((r.problems ?? []).map((p) => p.code))];
    } catch {
      codes = ['(no reasons file)'];
    }
    return { file, codes };
  });
  let interrupted: string[] = [];
  if (existsSync(ws.storeFile)) {
    const ledger = new Ledger(ws.storeFile);
    interrupted = ledger.all().filter((e) => e.state === 'interrupted').map((e) => e.request_id);
    ledger.close();
  }
  return { waiting: list(ws.requestsIn, md), running: list(ws.running, md), accepted: list(ws.inbound, md), quarantined, interrupted };
}

export function formatStatus(s: GateStatus): string {
  const section = (title: string, items: string[]) => [`${title} (${items.length})`, ...items.map((i) => `  ${i}`)];
  return [
    ...section('waiting in requests_in/', s.waiting),
    ...section('running', s.running),
    ...section('accepted in inbound/', s.accepted),
    ...section('quarantined', s.quarantined.map((q) => `${q.file}  ${q.codes.join(', ')}`)),
    ...(s.interrupted.length > 0 ? section('interrupted by a crash (not retried)', s.interrupted) : []),
  ].join('\n') + '\n';
}
