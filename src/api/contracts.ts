// `@airlock-host/airlock/contracts`: the documents Airlock reads and writes, each a Contract
// (parse unknown input into a typed value or coded problems, render it back). No sandbox, no
// store, no NATS: safe to import anywhere, e.g. to check a request before sending it.
export { allRules, checkText, contracts, type CheckOutcome } from '../contracts/index.js';
export type { Contract, DocumentKind, Rule } from '../contracts/problem.js';
export type { Problem, Result } from '../base/problem.js';
export { toolRequestContract, parseToolRequest, renderToolRequest, type ToolRequest } from '../contracts/tool-request.js';
export { toolResultContract, parseToolResult, renderToolResult, type ToolResult } from '../contracts/tool-result.js';
export { actionDescriptorContract, type ActionDescriptor } from '../contracts/action-descriptor.js';
export { sandboxResultContract, type SandboxResult, type RecommendedAction, type ExecutionStatus } from '../contracts/sandbox-result.js';
export {
  utpContract,
  parseCard,
  parseCallback,
  parseSubject,
  type UtpDocument,
  type ToolCallCard,
  type ToolResultCard,
  type ToolResultContent,
  type ToolStatus,
  type AfterExecution,
  type JsonObject,
  type JsonValue,
} from '../contracts/utp.js';
