// `@airlock-host/airlock`: the host API. `openAirlock` is the facade most programs need; the
// rest is what it is built from, for a program that wants one step on its own (translate a
// document into an Action, hand it to the host core, promote a run...).
export {
  openAirlock,
  type Airlock,
  type AirlockCallOptions,
  type ApproveOutcome,
  type ConfirmOutcome,
  type ExecuteOptions,
  type OpenAirlockOptions,
  type RunOptions,
} from './airlock.js';

// The host core and what goes into it.
export { execute, type ExecuteOutcome, type ExecuteRequest } from '../host/execute.js';
export { readRunRecord, type Door, type RunRecord } from '../host/record.js';
export type { Action, ActionInput, ActionLimits, Lane, RiskLevel } from '../action/action.js';
export { actionFromToolRequest } from '../action/from-tool-request.js';
export { actionFromDescriptor } from '../action/from-action-descriptor.js';
export { actionFromArgv, type ArgvRequest } from '../action/from-argv.js';
export type { ApprovalDecision, ApprovalEvidence } from '../approval/decide.js';
export { runFile, type FileRunOutcome, type RunFileOptions } from '../cli/run-file.js';
export type { RunEvent } from '../sandbox/types.js';

// Workspaces, promotion and the audit log.
export { openWorkspace, workspaceRoot, type Workspace } from '../workspace/workspace.js';
export { promote, rollback, recover, confirm, history, type PromoteOptions, type PromoteOutcome, type RollbackOptions, type RollbackOutcome, type HistoryLine } from '../commit/index.js';
export { openAuditLog } from '../audit/index.js';
export { generateOperatorKey, keyDir } from '../approval/keys.js';

export type { Problem } from '../base/problem.js';
