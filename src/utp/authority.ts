import type { Problem } from '../base/problem.js';
import type { UtpIdentity } from '../contracts/utp.js';

/**
 * Who may cancel a UTP call. Anyone subscribed to a project's command subjects sees every call's
 * identity (agent_turn_id, tool_call_id), so knowing it proves nothing: a cancel over NATS is obeyed
 * only when it comes from the agent that made the call, in the same turn (same agent_id and
 * agent_turn_id as the call's own command). An operator cancels through the store with
 * `airlock calls cancel` instead (store access is the operator's; a cancel only stops a call).
 *
 * A cancel for a call no worker has seen yet cannot be judged (the call's command says who made
 * it): it waits for the command (redelivered with a delay) and is dropped, logged, after its last
 * delivery.
 */

export const authorityRules = [
  {
    code: 'UTPS_CANCEL_NOT_AUTHORIZED',
    spec: 'Airlock: a cancel command is obeyed only from the agent that made the call (the same agent_id and agent_turn_id as the call\'s command); any other cancel is refused, logged and audited, and the call goes on.',
    fix: 'Cancel from the calling agent, with its own agent_id; an operator cancels with `airlock calls cancel AGENT_TURN_ID TOOL_CALL_ID`.',
  },
  {
    code: 'UTPS_CANCEL_UNKNOWN_CALL',
    spec: 'Airlock: a cancel for a call no worker has claimed waits for the call\'s command (redelivered with a delay); after its last delivery it is dropped and logged.',
    fix: 'Publish the cancel after the command; a call that was never sent needs no cancel.',
  },
] as const;

/** Problems when `cancel` may not cancel the call made by `caller` (undefined: the call's identity is unknown). */
export function checkCancelAuthority(cancel: UtpIdentity, caller: UtpIdentity | undefined): Problem[] {
  if (!caller) {
    return [{ code: 'UTPS_CANCEL_NOT_AUTHORIZED', message: 'the call\'s own identity is not known to this worker, so no cancel over NATS can be checked against it; an operator can cancel it with `airlock calls cancel`' }];
  }
  if (cancel.agent_id !== caller.agent_id || cancel.agent_turn_id !== caller.agent_turn_id) {
    return [
      {
        code: 'UTPS_CANCEL_NOT_AUTHORIZED',
        message: `agent ${cancel.agent_id.slice(0, 100)} may not cancel call ${caller.tool_call_id.slice(0, 100)}: only its caller (agent ${caller.agent_id.slice(0, 100)}, the same turn) or an operator can`,
      },
    ];
  }
  return [];
}
