import { createHash } from 'node:crypto';
import { canonicalJson } from '../audit/canonical.js';
import type { Declaration } from '../contracts/sandbox-result.js';
import type { Action } from './action.js';

/** An Action and, for a composite, each of its steps (depth first). */
export const actionsOf = (a: Action): Action[] => [a, ...(a.children ?? []).flatMap(actionsOf)];

/**
 * What a run's Sandbox Result is cross-checked against: the action's scope, its declared effects
 * (the union over a composite's steps) and its caps. A door that lets a tool write its own /out
 * (Tool Requests, UTP tools) declares /out as part of its scope.
 */
export function declarationOf(a: Action): Declaration {
  const all = actionsOf(a);
  const effect = (k: 'create' | 'modify' | 'delete') => all.flatMap((x) => x.effects[k]);
  const ownOut = a.source !== 'action-descriptor';
  return {
    action_id: a.id,
    scope: { paths: [...a.scope.paths, ...(ownOut ? ['/out'] : [])], recursive: a.scope.recursive || ownOut },
    effects: { create: effect('create'), modify: effect('modify'), delete: effect('delete'), network: all.some((x) => x.effects.network) },
    caps: { cpu_ms: a.limits.cpuMs, memory_bytes: a.limits.memoryBytes, disk_bytes: a.limits.diskBytes, duration_ms: a.limits.wallMs },
  };
}

/**
 * The key of "the same action" for cooldown_on_repeat: what the action does (kind, what runs,
 * scope, effects, preconditions, its steps), without its id, its prose or its limits, so that a
 * re-issued declaration with a new id is the same action.
 */
export function declarationHash(a: Action): string {
  const core = (x: Action): unknown => ({ kind: x.kind, run: x.run, scope: x.scope, effects: x.effects, preconditions: x.preconditions, children: (x.children ?? []).map(core) });
  const c = canonicalJson(core(a));
  if ('error' in c) throw new Error(`an Action is not JSON data: ${c.error}`); // a bug
  return createHash('sha256').update(c.text).digest('hex');
}
