// The layering rule of docs/dev/conventions.md as a pure function over source texts, so the test can
// run it on the real tree and on a tree with a deliberately bad import.
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, posix } from 'node:path';

/** Folders of the host core: they know nothing of markdown on disk, NATS or SQL. */
const CORE = ['base', 'action', 'host', 'policy', 'approval', 'sandbox', 'judge', 'commit', 'audit', 'pipeline', 'report', 'workspace'];
/** Front doors and adapters: they depend on the core, never the other way round. */
const ADAPTERS = ['cli', 'gates', 'utp', 'store'];
/** The front doors' documents (the Sandbox Result is the host's own record, the detectors are shared). */
const DOOR_DOCUMENT = /^contracts\/(tool-request|tool-result|action-descriptor|utp|markdown|index)[^/]*\.ts$/;
/** Translators from a door's document into an Action: door code that lives beside the Action (DESIGN.md). */
const TRANSLATOR = /^action\/from-[^/]+\.ts$/;

export interface Violation {
  from: string;
  to: string;
  why: string;
}

/** Relative imports of each file, resolved to src-relative `.ts` paths. */
export function importGraph(sources: ReadonlyMap<string, string>): Map<string, string[]> {
  const graph = new Map<string, string[]>();
  const re = /(?:^|\n)\s*(?:import|export)\b[^'";]*?from\s*['"](\.{1,2}\/[^'"]+)['"]|\bimport\(\s*['"](\.{1,2}\/[^'"]+)['"]\s*\)/g;
  for (const [file, text] of sources) {
    const out: string[] = [];
    for (const m of text.matchAll(re)) {
      const spec = (m[1] ?? m[2]) as string;
      out.push(posix.normalize(posix.join(posix.dirname(file), spec)).replace(/\.js$/, '.ts'));
    }
    graph.set(file, out);
  }
  return graph;
}

const top = (p: string): string => p.split('/')[0] as string;

export function layerViolations(sources: ReadonlyMap<string, string>): Violation[] {
  const found: Violation[] = [];
  for (const [from, tos] of importGraph(sources)) {
    const layer = top(from);
    for (const to of tos) {
      const target = top(to);
      if (layer === 'base' && target !== 'base') found.push({ from, to, why: 'base/ is the leaf: it imports nothing of ours' });
      else if (CORE.includes(layer) && ADAPTERS.includes(target) && !(TRANSLATOR.test(from) && target === 'utp' && to === 'utp/tools.ts'))
        found.push({ from, to, why: `the core (${layer}/) imports the adapter ${target}/` });
      else if (CORE.includes(layer) && DOOR_DOCUMENT.test(to) && !TRANSLATOR.test(from))
        found.push({ from, to, why: `the core (${layer}/) imports a front door's document` });
    }
  }
  return found;
}

/** Every import cycle, each as the files around it (first file repeated at the end). */
export function importCycles(sources: ReadonlyMap<string, string>): string[][] {
  const graph = importGraph(sources);
  const state = new Map<string, 'open' | 'done'>();
  const stack: string[] = [];
  const cycles: string[][] = [];
  const visit = (f: string): void => {
    state.set(f, 'open');
    stack.push(f);
    for (const to of graph.get(f) ?? []) {
      if (!graph.has(to)) continue;
      if (state.get(to) === 'open') cycles.push([...stack.slice(stack.indexOf(to)), to]);
      else if (!state.has(to)) visit(to);
    }
    stack.pop();
    state.set(f, 'done');
  };
  for (const f of graph.keys()) if (!state.has(f)) visit(f);
  return cycles;
}

/** src/**.ts of the checkout, keyed by their path under src/. */
export function readSources(srcDir: string): Map<string, string> {
  const out = new Map<string, string>();
  const walk = (dir: string): void => {
    for (const name of readdirSync(dir)) {
      const p = join(dir, name);
      if (statSync(p).isDirectory()) walk(p);
      else if (name.endsWith('.ts')) out.set(posix.relative(srcDir, p), readFileSync(p, 'utf8'));
    }
  };
  walk(srcDir);
  return out;
}
