import * as z from 'zod';
import { RFC3339, CARD_TYPES, ERROR_CODE_PATTERN, MAX_ERROR_CODE_LENGTH, MAX_ERROR_MESSAGE_LENGTH } from './utp-card.js';
import { AFTER_EXECUTION, ID_PATTERN, MAX_ID_LENGTH, TOOL_STATUS } from './utp-common.js';
import { SUBJECT_TOKEN } from './utp-subject.js';

/**
 * The published shapes (JSON Schema under schemas/utp.*.schema.json). They describe the same
 * fields as the hand-written parsers, which stay the authority: cross-field rules (identity from
 * headers, header/payload agreement, subject form, error mirror, __cg_control values, card
 * self-consistency) are only in the parsers, with their own codes and lines.
 * Payload objects are open (`additionalProperties` allowed): UTP 4.3 says receivers ignore unknown fields.
 */

const id = z.string().min(1).max(MAX_ID_LENGTH).regex(ID_PATTERN);
const turnEpoch = z.number().int().min(0).describe('Non-negative integer; numeric strings are refused.');
const afterExecution = z.enum(AFTER_EXECUTION);
const status = z.enum(TOOL_STATUS);
const forbidden = z.never().optional();

const commandShape = {
  agent_id: id,
  agent_turn_id: id,
  turn_epoch: turnEpoch,
  tool_call_id: id,
  after_execution: afterExecution,
  tool_call_card_id: id.describe('The tool.call card that holds the arguments.'),
  tool_name: id.optional(),
  context_box_id: id.optional(),
  step_id: id.optional(),
  args: forbidden,
  arguments: forbidden,
  result: forbidden,
};

export const toolCommandSchema = z
  .looseObject(commandShape)
  .describe('UTP tool command payload on cg.<ver>.<project_id>.<channel_id>.cmd.tool.<target>...; identity fields may come from CG-* headers instead.');

export const pmoCommandSchema = z
  .looseObject({ ...commandShape, step_id: id, tool_name: id.describe('The <tool> token of the subject.') })
  .describe('UTP PMO built-in command payload on cg.<ver>.<project_id>.<channel_id>.cmd.sys.pmo.internal.<tool>.');

export const callbackSchema = z
  .looseObject({
    agent_id: id,
    agent_turn_id: id,
    turn_epoch: turnEpoch,
    tool_call_id: id,
    tool_result_card_id: id,
    status,
    after_execution: afterExecution,
    step_id: id.optional(),
    result: forbidden,
  })
  .describe('UTP callback report (Tool Service / PMO -> ExecutionService): routing and pointer fields only.');

export const toolCallContentSchema = z
  .looseObject({
    tool_call_id: id,
    tool_name: id,
    arguments: z.record(z.string(), z.json()),
    agent_turn_id: id.optional(),
    step_id: id.optional(),
    trace_id: id.optional(),
  })
  .describe('Content of a tool.call card.');

const toolError = z.looseObject({
  code: z.string().max(MAX_ERROR_CODE_LENGTH).regex(ERROR_CODE_PATTERN).describe('Known: tool_timeout, auth_failed, bad_request, upstream_unavailable, internal_error; extensible.'),
  message: z.string().min(1).max(MAX_ERROR_MESSAGE_LENGTH),
  detail: z.json().optional(),
});

const resultBase = {
  tool_call_id: id.optional(),
  after_execution: afterExecution,
  result: z.json().optional().describe('Any JSON; result.__cg_control.after_execution (suspend|terminate) overrides after_execution.'),
};

export const toolResultContentSchema = z
  .union([
    z.looseObject({ ...resultBase, status: z.literal('success'), error: forbidden }),
    z.looseObject({ ...resultBase, status: z.enum(TOOL_STATUS.filter((s) => s !== 'success') as ['failed', 'canceled', 'timeout', 'partial']), error: toolError }),
  ])
  .describe('Content of a tool.result card (ToolResultContent): error is required unless status is success.');

const metadata = z.looseObject({ trace_id: id.optional(), step_id: id.optional(), parent_step_id: id.optional(), traceparent: z.string().optional() });
const cardBase = { card_id: id, created_at: z.string().regex(RFC3339), metadata: metadata.optional() };

export const cardSchema = z
  .discriminatedUnion('type', [
    z.looseObject({ ...cardBase, type: z.literal(CARD_TYPES[0]), content: toolCallContentSchema }),
    z.looseObject({ ...cardBase, type: z.literal(CARD_TYPES[1]), content: toolResultContentSchema }),
  ])
  .describe('A tool.call or tool.result card.');

const subject = z.string().max(512).describe(`Dot-separated tokens matching ${SUBJECT_TOKEN.source}.`);
const headers = z.record(z.string(), z.union([z.string(), z.array(z.string())])).describe('NATS headers; CG-Project-Id and CG-Channel-Id (equal to the subject\'s), CG-Agent-Id, CG-Turn-Id, CG-Turn-Epoch, CG-Tool-Call-Id, CG-Step-Id and traceparent are read.');

// In a file, identity fields may sit in the headers instead of the payload.
const identityMask = { agent_id: true, agent_turn_id: true, turn_epoch: true, tool_call_id: true, step_id: true } as const;

export const documentSchema = z
  .discriminatedUnion('utp', [
    z.strictObject({ utp: z.literal('tool_command'), subject, headers: headers.optional(), payload: toolCommandSchema.partial(identityMask) }),
    z.strictObject({ utp: z.literal('pmo_command'), subject, headers: headers.optional(), payload: pmoCommandSchema.partial(identityMask) }),
    z.strictObject({ utp: z.literal('callback'), headers: headers.optional(), wakeup_subject: subject.optional(), payload: callbackSchema.partial(identityMask) }),
    z.strictObject({ utp: z.literal('card'), card: cardSchema }),
  ])
  .describe('An Airlock UTP message file (.json with a top-level `utp` key).');

export const utpSchemas = {
  'utp.document': documentSchema,
  'utp.tool-command': toolCommandSchema,
  'utp.pmo-command': pmoCommandSchema,
  'utp.callback': callbackSchema,
  'utp.tool-call-content': toolCallContentSchema,
  'utp.tool-result-content': toolResultContentSchema,
  'utp.card': cardSchema,
};
