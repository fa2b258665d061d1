// `@airlock-host/airlock/client`: the agent side of a UTP call over NATS (what an agent process
// imports). It opens nothing by itself: the caller connects NATS and opens the card store it
// shares with `airlock serve --nats`, and closes both when done.
export { callTool, cancelTool, readAnswer, toolCallCardId, clientRules, type CallToolOptions, type CallToolOutcome } from '../utp/client.js';
export { connectNats, NatsUnavailableError } from '../utp/connect.js';
export { openStore, type Store, type ToolRecord } from '../store/open.js';
export { defaultToolSubject } from '../utp/tools.js';
export type { Problem } from '../base/problem.js';
export type { ToolResultCard, ToolResultContent, ToolStatus, AfterExecution, JsonObject } from '../contracts/utp.js';
