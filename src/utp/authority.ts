import type { Problem } from '../base/problem.js';
import type { SubjectRoute, UtpIdentity } from '../contracts/utp.js';

/**
 * Who may cancel a UTP call. Anyone subscribed to a project's command subjects sees every call's
 * identity (agent_turn_id, tool_call_id), so knowing it proves nothing: a cancel over NATS is obeyed
 * only when it comes from the agent that made the call, in the same turn (same agent_id and
 * agent_turn_id as the call's own command), on the cancel subject of the call's own project and
 * channel (a deployment's NATS permissions give each project its own subjects; a cancel published
 * in another project proves nothing about who sent it). An operator cancels through the store with
 * `airlock calls cancel` instead (store access is the operator's; a cancel only stops a call).
 *
 * A cancel for a call no worker has seen yet cannot be judged (the call's command says who made
 * it): it waits for the command (redelivered with a delay) and is dropped, logged, after its last
 * delivery.
 */

export const authorityRules = [
  {
    code: 'UTPS_CANCEL_NOT_AUTHORIZED',
    spec: 'Airlock: a cancel command is obeyed only from the agent that made the call (the same agent_id and agent_turn_id as the call\'s command), published on the cancel subject of the call\'s own version, project and channel; any other cancel is refused, logged and audited, and the call goes on.',
    fix: 'Cancel from the calling agent, with its own agent_id, on the cancel subject of the project and channel the call was made in; an operator cancels with `airlock calls cancel AGENT_TURN_ID TOOL_CALL_ID`.',
  },
  {
    code: 'UTPS_ANCHOR_CONFLICT',
    spec: 'UTP 3.2: a call is keyed by (agent_turn_id, tool_call_id), and a re-entry through the same tool_call_card_id is idempotent. Airlock: a command with the anchor of a call already claimed, from another agent or another version, project or channel, for another tool or with another tool.call card, is not that call\'s retry: it is refused (logged and audited) and the claimed call\'s answer is never sent to it; the command does not run.',
    fix: 'Give every call its own ids (agent_turn_id is unique per turn): a conflict means ids were reused, leaked or forged; look for the other sender in the audit log.',
  },
  {
    code: 'UTPS_CANCEL_UNKNOWN_CALL',
    spec: 'Airlock: a cancel for a call no worker has claimed waits for the call\'s command (redelivered with a delay); after its last delivery it is dropped and logged.',
    fix: 'Publish the cancel after the command; a call that was never sent needs no cancel.',
  },
] as const;

/** Who sent a cancel, or made a call: the identity and the route of its subject. */
export interface CallOrigin {
  identity: UtpIdentity;
  route: Pick<SubjectRoute, 'ver' | 'projectId' | 'channelId'>;
}

const routeOf = (r: CallOrigin['route']): string => `${r.ver}.${r.projectId}.${r.channelId}`;
/** The tool a subject names: its target and the tokens after it (`echo.approve.long`). */
const toolOf = (r: CallCommand['route']): string => [r.target, ...r.rest].join('.');

/** A call's command as a claim keeps it: who and where, which tool, and its tool.call card. */
export interface CallCommand extends CallOrigin {
  route: Pick<SubjectRoute, 'ver' | 'projectId' | 'channelId' | 'kind' | 'target' | 'rest'>;
  tool_call_card_id: string | null;
}

/**
 * Why a command with a claimed call's anchor is not that call's retry, or null. A retry comes from the
 * same agent, version, project and channel, for the same tool, through the same tool.call card (UTP
 * 3.2: a re-entry with the same tool_call_id through the same tool_call_card_id is idempotent): the
 * same ids with another card or tool are another call, which must not get the first one's answer.
 */
export function anchorConflict(command: CallCommand, claimed: CallCommand | undefined): Problem | null {
  if (!claimed) return null; // a claim of an older Airlock: nothing to compare
  const call = `call ${claimed.identity.tool_call_id.slice(0, 100)} of turn ${claimed.identity.agent_turn_id.slice(0, 100)}`;
  const conflict = (message: string): Problem => ({ code: 'UTPS_ANCHOR_CONFLICT', message: `${message} is not its retry: refused, not run` });
  if (command.identity.agent_id !== claimed.identity.agent_id || routeOf(command.route) !== routeOf(claimed.route)) {
    return conflict(`${call} was claimed for agent ${claimed.identity.agent_id.slice(0, 100)} in ${routeOf(claimed.route).slice(0, 300)}; a command with its ids from agent ${command.identity.agent_id.slice(0, 100)} in ${routeOf(command.route).slice(0, 300)}`);
  }
  if (command.route.kind !== claimed.route.kind || toolOf(command.route) !== toolOf(claimed.route)) {
    return conflict(`${call} was made to tool ${toolOf(claimed.route).slice(0, 256)}; a command with its ids for tool ${toolOf(command.route).slice(0, 256)}`);
  }
  if (command.tool_call_card_id !== null && claimed.tool_call_card_id !== null && command.tool_call_card_id !== claimed.tool_call_card_id) {
    return conflict(`${call} was made with tool.call card ${claimed.tool_call_card_id.slice(0, 256)}; a command with its ids and card ${command.tool_call_card_id.slice(0, 256)}`);
  }
  return null;
}

/** Problems when `cancel` may not cancel the call made by `caller` (undefined: the call's origin is unknown). */
export function checkCancelAuthority(cancel: CallOrigin, caller: CallOrigin | undefined): Problem[] {
  if (!caller) {
    return [{ code: 'UTPS_CANCEL_NOT_AUTHORIZED', message: 'the call\'s own identity is not known to this worker, so no cancel over NATS can be checked against it; an operator can cancel it with `airlock calls cancel`' }];
  }
  const by = cancel.identity;
  const of = caller.identity;
  if (by.agent_id !== of.agent_id || by.agent_turn_id !== of.agent_turn_id) {
    return [
      {
        code: 'UTPS_CANCEL_NOT_AUTHORIZED',
        message: `agent ${by.agent_id.slice(0, 100)} may not cancel call ${of.tool_call_id.slice(0, 100)}: only its caller (agent ${of.agent_id.slice(0, 100)}, the same turn) or an operator can`,
      },
    ];
  }
  if (routeOf(cancel.route) !== routeOf(caller.route)) {
    return [
      {
        code: 'UTPS_CANCEL_NOT_AUTHORIZED',
        message: `a cancel published in ${routeOf(cancel.route).slice(0, 300)} may not cancel call ${of.tool_call_id.slice(0, 100)}, made in ${routeOf(caller.route).slice(0, 300)}: a call is canceled on its own project's and channel's cancel subject`,
      },
    ];
  }
  return [];
}
