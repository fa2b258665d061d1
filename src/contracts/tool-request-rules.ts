import { warningCodes } from './problem.js';
import { type Problem } from '../base/problem.js';

/**
 * Every code the Tool Request contract can emit (besides the shared DOC_* and FM_* codes), with the
 * spec sentence it enforces (or "Airlock:" for Airlock's stricter rule) and how to fix it.
 * Spec: /work/shared/specs/tool-request.schema.md; the command rules are explained in docs/tool-request.md.
 */
export const toolRequestRules = [
  // --- file name and identity
  {
    code: 'TR_FILE_NAME',
    source: 'airlock',
    protects: 'the gate files, claims and recovers a request by its file name: a name that is not `<request_id>.md` breaks crash recovery (an interrupted run is re-queued instead of reported) and lets one id live in two files',
    spec: 'File Naming: `TR-YYYYMMDD-HHMMSSZ-<slug>.md` (Airlock: required, slug is lowercase letters, digits, `-` and `_`, at most 64 characters).',
    fix: 'Name the file `<request_id>.md`, e.g. `TR-20260209-160501Z-python-stats.md`.',
  },
  {
    code: 'TR_ID_FILE_MISMATCH',
    source: 'airlock',
    protects: 'the same as TR_FILE_NAME: the file name is the identity the gate\'s ledger and crash recovery use',
    spec: 'Airlock: the file name is the request_id followed by `.md`.',
    fix: 'Rename the file to `<request_id>.md` or correct `request_id`.',
  },
  {
    code: 'TR_REQUEST_ID',
    source: 'both',
    protects: 'request ids become file names, ledger keys and audit fields: one fixed form, no path characters, a real time',
    spec: 'Required Front Matter: `request_id: "TR-20260209-160501Z-python-stats"` (Airlock: `TR-YYYYMMDD-HHMMSSZ-<slug>` with a real date and time).',
    fix: 'Write request_id as `TR-` + the creation time as YYYYMMDD-HHMMSSZ + `-` + a lowercase slug.',
  },
  {
    code: 'TR_ID_TIME',
    source: 'airlock',
    severity: 'warning',
    spec: 'Airlock writes request ids whose timestamp is created_utc (to the second); another timestamp is reported.',
    fix: 'Make request_id start with the created_utc date and time, e.g. created_utc 2026-02-09T16:05:01Z gives TR-20260209-160501Z-<slug>.',
  },
  // --- front matter fields
  {
    code: 'TR_REQUEST_TYPE',
    source: 'spec',
    spec: 'Required Front Matter: `request_type: tool_request`.',
    fix: 'Set `request_type: tool_request`.',
  },
  {
    code: 'TR_SCHEMA_VERSION',
    source: 'spec',
    spec: 'Required Front Matter: `schema_version: 1` (the only version Airlock reads).',
    fix: 'Set `schema_version: 1` (an unquoted integer).',
  },
  {
    code: 'TR_FIELD_MISSING',
    source: 'spec',
    spec: 'Required Front Matter: every listed field is present (network, network_allowlist and backend are optional).',
    fix: 'Add the field named in the message to the front matter.',
  },
  {
    code: 'TR_FIELD_TYPE',
    source: 'spec',
    spec: 'Required Front Matter: each field has the type shown in the schema (strings, integers, lists of mappings).',
    fix: 'Write the field with the type named in the message (e.g. a list of `- name: ... sha256: ...` mappings for inputs).',
  },
  {
    code: 'TR_FIELD_UNKNOWN',
    source: 'airlock',
    protects: 'an unknown field could carry a constraint nobody enforces: the approver would sign something the sandbox ignores',
    spec: 'Airlock: no front matter fields beyond the schema (an unknown field could carry a constraint nobody enforces).',
    fix: 'Remove the field, or check its spelling against the schema.',
  },
  {
    code: 'TR_FIELD_EMPTY',
    source: 'spec',
    spec: 'Required Front Matter: purpose is one sentence; constraints and output descriptions are text (Airlock: not blank).',
    fix: 'Write a non-blank value for the field named in the message.',
  },
  {
    code: 'TR_ENUM',
    source: 'both',
    protects: '`backend` picks the sandbox lane: an unknown value must not fall back to some lane the approver did not choose',
    spec: 'Required Front Matter: `requested_by: human|core_draft`, `language: python|node|ts|go|ruby|shell_forbidden`, `network: none|allowlist`, `backend: ns|monty`.',
    fix: 'Use one of the values listed in the message, spelled exactly (lowercase).',
  },
  {
    code: 'TR_TIMESTAMP',
    source: 'both',
    protects: 'approval expiry and the order of creation and approval are computed from these times: they must be exact UTC instants',
    spec: 'Required Front Matter: created_utc and approved_utc are UTC timestamps like "2026-02-09T16:05:01Z" (Airlock: ISO-8601, `Z`, a real date, at most millisecond precision).',
    fix: 'Write the time as YYYY-MM-DDTHH:MM:SSZ in UTC.',
  },
  {
    code: 'TR_APPROVAL',
    source: 'spec',
    spec: 'Approval Gate: `approved_by` and `approved_utc` are present and non-empty; `requested_by` is present.',
    fix: 'The operator approves the request by filling approved_by and approved_utc; requested_by says who drafted it.',
  },
  {
    code: 'TR_APPROVAL_ORDER',
    source: 'airlock',
    severity: 'warning',
    spec: 'Airlock expects approval after creation (approved_utc not before created_utc); the reverse is reported (the signed approval and its expiry do not depend on it).',
    fix: 'Correct created_utc or approved_utc; approval cannot precede creation.',
  },
  {
    code: 'TR_LIMIT',
    source: 'both',
    protects: 'a zero, negative or non-numeric limit would leave the sandbox without that limit',
    spec: 'Required Front Matter: `cpu_limit` (cores), `memory_limit_mb`, `time_limit_sec` (Airlock: positive; cpu_limit a number or numeric string, the others integers).',
    fix: 'Give a positive limit, e.g. cpu_limit: "2", memory_limit_mb: 1024, time_limit_sec: 120.',
  },
  {
    code: 'TR_LANGUAGE_SHELL',
    source: 'spec',
    spec: 'Forbidden Content: shell as language (`language: shell_forbidden` is always rejected).',
    fix: 'Write the work as a python, node, ts, go or ruby script and declare it as an input.',
  },
  {
    code: 'TR_BACKEND',
    source: 'airlock',
    protects: 'Monty has no files and no network: a request for another language or for network there could not run as approved (or would silently drop the network)',
    spec: 'Airlock: `backend: monty` runs Python code with no filesystem or network, so it requires `language: python` and `network: none`.',
    fix: 'Use backend ns for other languages or network access, or set language: python and network: none.',
  },
  // --- inputs and outputs
  {
    code: 'TR_INPUT_NAME',
    source: 'airlock',
    protects: 'an input name becomes the path /in/<name>: no slashes, `..` or leading `-` (path traversal, option injection)',
    spec: 'Airlock: an input is mounted at `/in/<name>`; the name is a plain file name (letters, digits, `.`, `_`, `+`, `-`; not starting with `-`; not `.` or `..`; no slashes), at most 255 characters.',
    fix: 'Rename the input to a plain file name such as `input.csv`.',
  },
  {
    code: 'TR_INPUT_DUPLICATE',
    source: 'airlock',
    protects: 'two inputs of one name: which file, with which hash, is mounted at /in/<name> would be ambiguous',
    spec: 'Airlock: input names are unique (each is one file under /in).',
    fix: 'Declare each input once.',
  },
  {
    code: 'TR_INPUT_SHA256',
    source: 'both',
    protects: 'inputs are stored and verified by their lowercase sha256 before anything runs; another spelling would fail only after approval',
    spec: 'Approval Gate: hashes are present for all declared inputs (Airlock: sha256 as 64 lowercase hex digits).',
    fix: 'Add `sha256:` with the output of `sha256sum <file>` (64 lowercase hex digits).',
  },
  {
    code: 'TR_OUTPUT_PATH',
    source: 'both',
    protects: 'an output path outside /out (`..`, absolute elsewhere) would let the run write or promote outside its output area',
    spec: 'Output Expectations: each output path is restricted to `/out/...` (Airlock: a relative path means /out/<path>; no `..`, `.` or empty segments, no backslashes).',
    fix: 'Write the output as `name.json` or `/out/name.json`.',
  },
  {
    code: 'TR_OUTPUT_DUPLICATE',
    source: 'airlock',
    severity: 'warning',
    spec: 'Airlock declares each expected output once (after `output.json` = `/out/output.json` normalisation); a repeat is reported and read once.',
    fix: 'Remove the repeated output.',
  },
  {
    code: 'TR_NETWORK_ALLOWLIST',
    source: 'both',
    protects: '`network` and its allowlist must say the same thing: an approver must not sign `allowlist` believing hosts are granted when none are, or hosts under `none`',
    spec: 'Required Front Matter: `network_allowlist` only if network=allowlist (Airlock: and then non-empty).',
    fix: 'With network: none leave network_allowlist empty or out; with network: allowlist list the hosts.',
  },
  {
    code: 'TR_NETWORK_HOST',
    source: 'airlock',
    protects: 'a bare `*` or a malformed entry would grant more network than the approver can see',
    spec: 'Airlock: each allowlist entry is a host name (optionally `*.` prefixed), an IP address, optionally with `:port`, or an http(s) URL; a bare `*` is not an allowlist.',
    fix: 'List concrete hosts such as `api.example.com` or `api.example.com:443`.',
  },
  // --- sections
  {
    code: 'TR_SECTION_MISSING',
    source: 'spec',
    spec: 'Required Sections: `## Command` (or `## Code` for backend monty), `## Input Files`, `## Output Expectations`, `## Risk Assessment`.',
    fix: 'Add the missing `## ` section.',
  },
  {
    code: 'TR_SECTION_ORDER',
    source: 'spec',
    spec: 'Required Sections (in this order): Command, Input Files, Output Expectations, Risk Assessment.',
    fix: 'Reorder the sections.',
  },
  {
    code: 'TR_SECTION_DUPLICATE',
    source: 'airlock',
    protects: 'two `## Command` (or Risk Assessment) sections: which one counts would be ambiguous',
    spec: 'Airlock: each required section appears once.',
    fix: 'Merge the repeated sections into one.',
  },
  {
    code: 'TR_SECTION_WRONG_BACKEND',
    source: 'airlock',
    protects: 'the approver would read code or a command that the chosen backend never runs',
    spec: 'Airlock: `## Code` only with `backend: monty`, `## Command` only without it.',
    fix: 'Use the section of the backend (`## Command` for ns, `## Code` for monty), or change the backend.',
  },
  {
    code: 'TR_SECTION_UNKNOWN',
    source: 'airlock',
    severity: 'warning',
    spec: 'Airlock writes only the four required `## ` sections (other sections are reported; their text is scanned like the rest).',
    fix: 'Remove the section, turn it into a `### ` subsection, or fix the title spelling.',
  },
  {
    code: 'TR_INPUT_NOT_LISTED',
    source: 'spec',
    spec: 'Input Files: list each input file and expected location (`/in/...`).',
    fix: 'Mention every declared input as `/in/<name>` in `## Input Files`.',
  },
  {
    code: 'TR_INPUT_UNDECLARED',
    source: 'both',
    protects: 'every file the command or the section names under /in is one the approver saw with its hash',
    spec: 'Input Files: ... matching `inputs` hashes (Airlock: every `/in/<name>` in the section or the command is a declared input).',
    fix: 'Declare the file under `inputs` with its sha256, or remove the reference.',
  },
  {
    code: 'TR_INPUT_HASH_MISMATCH',
    source: 'spec',
    spec: 'Input Files: matching `inputs` hashes (a sha256 written next to an input must be the declared one).',
    fix: 'Copy the sha256 from the front matter, or recompute it and update both places.',
  },
  {
    code: 'TR_OUTPUT_NOT_LISTED',
    source: 'spec',
    spec: 'Output Expectations: list each output path restricted to `/out/...`.',
    fix: 'Mention every declared output as `/out/<path>` in `## Output Expectations`.',
  },
  {
    code: 'TR_OUTPUT_UNDECLARED',
    source: 'airlock',
    severity: 'warning',
    spec: 'Airlock lists in Output Expectations only the paths declared in `outputs_expected`; others are reported (the judge holds the run to outputs_expected).',
    fix: 'Add the path to outputs_expected or remove it from the section.',
  },
  {
    code: 'TR_RISK_LEVEL',
    source: 'both',
    protects: 'one risk level: two that disagree leave the approver\'s decision ambiguous',
    spec: 'Risk Assessment: must include `Risk level: low|medium|high` (once).',
    fix: 'Add a line `Risk level: low`, `medium` or `high`.',
  },
  {
    code: 'TR_RISK_JUSTIFICATION',
    source: 'both',
    protects: 'one justification, on its line: two that disagree leave the approver\'s decision ambiguous',
    spec: 'Risk Assessment: must include `Justification:` short text (once, non-empty, on the same line).',
    fix: 'Add a line `Justification: <why the risk level is right>`.',
  },
  {
    code: 'TR_RISK_SENSITIVITY',
    source: 'both',
    protects: 'one data sensitivity: two that disagree leave the approver\'s decision ambiguous',
    spec: 'Risk Assessment: must include `Data sensitivity: public|internal|confidential` (once).',
    fix: 'Add a line `Data sensitivity: public`, `internal` or `confidential`.',
  },
  {
    code: 'TR_RISK_NETWORK_RATIONALE',
    source: 'spec',
    spec: 'Risk Assessment: must include `Network rationale:` why network is needed, if any (with network: allowlist, present, non-empty and not `none`).',
    fix: 'Add `Network rationale: none` (network: none) or say why each allowlisted host is needed.',
  },
  {
    code: 'TR_RISK_NETWORK_RATIONALE_OMITTED',
    source: 'airlock',
    severity: 'warning',
    spec: 'Risk Assessment: `Network rationale:` why network is needed (if any); Airlock writes `Network rationale: none` when no network is used.',
    fix: 'Add `Network rationale: none`.',
  },
  // --- the command line (backend ns)
  {
    code: 'TR_COMMAND_EMPTY',
    source: 'spec',
    spec: 'Command: must be a single command line in plain text.',
    fix: 'Write the command on one line under `## Command`, e.g. `python -u script.py --in /in/input.csv`.',
  },
  {
    code: 'TR_COMMAND_MULTILINE',
    source: 'spec',
    spec: 'Command: must be a single command line; requests containing multiple commands MUST be rejected.',
    fix: 'Keep exactly one line in `## Command`; move explanations to Risk Assessment.',
  },
  {
    code: 'TR_COMMAND_FENCE',
    source: 'both',
    protects: 'backticks around the line are command substitution to a shell: what runs must be the bare line the approver read',
    spec: 'Command: plain text (no code fences) (Airlock: no inline-code backticks around the line either).',
    fix: 'Remove the ``` fence or the surrounding backticks; write the bare command line.',
  },
  {
    code: 'TR_COMMAND_SYNTAX',
    source: 'airlock',
    protects: 'the line is split into argv without a shell: an open quote, a comment, grouping or a hidden character would make the argv differ from what the approver read',
    spec: 'Airlock: the command is plain shell words: quotes closed, no trailing backslash, no comments, no ( ) grouping, no control or bidi characters.',
    fix: 'Close the quote, remove the comment or grouping, or quote the character if it is part of an argument.',
  },
  {
    code: 'TR_COMMAND_CHAINING',
    source: 'spec',
    spec: 'Command: shell chaining (`;`, `&&`, `||`) MUST be rejected.',
    fix: 'Run one program; put the steps into the script. Quote the characters if they are data.',
  },
  {
    code: 'TR_COMMAND_PIPE',
    source: 'spec',
    spec: 'Forbidden Content: pipelines (`|`).',
    fix: 'Do the filtering inside the script. Quote `|` if it is data.',
  },
  {
    code: 'TR_COMMAND_REDIRECT',
    source: 'spec',
    spec: 'Forbidden Content: redirection (`<`, `>`, `>>`, `2>&1`, ...).',
    fix: 'Pass files as arguments (/in/... and /out/...); stdout and stderr are captured by Airlock.',
  },
  {
    code: 'TR_COMMAND_HEREDOC',
    source: 'spec',
    spec: 'Command: heredocs (`<<`, `<<-`, `<<<`) MUST be rejected.',
    fix: 'Put the text into a declared input file.',
  },
  {
    code: 'TR_COMMAND_SUBSTITUTION',
    source: 'airlock',
    protects: 'a substitution hides a second command inside the first',
    spec: 'Airlock: no command substitution (`$( )`, `$(( ))`, backticks): it hides a second command.',
    fix: 'Compute the value in the script, or write it literally.',
  },
  {
    code: 'TR_COMMAND_BACKGROUND',
    source: 'airlock',
    protects: '`&` starts a second process that outlives the supervised one',
    spec: 'Airlock: no background `&` (it starts a second, unsupervised process).',
    fix: 'Remove the `&`; Airlock runs the program in the foreground with a time limit.',
  },
  {
    code: 'TR_COMMAND_EXPANSION',
    source: 'airlock',
    protects: 'no shell expands them: the program would get `$VAR` or `~` literally, not what the approver read into them',
    spec: 'Airlock: no parameter expansion (`$VAR`, `${...}`, also inside double quotes) and no `~`: there is no shell and no environment to expand them.',
    fix: 'Write the value literally, or single-quote it (`\'$literal\'`) if the dollar sign or tilde is data.',
  },
  {
    code: 'TR_COMMAND_GLOB',
    source: 'airlock',
    protects: 'no shell expands them: the program would get `*` literally, not the files the approver imagined',
    spec: 'Airlock: no unquoted glob or brace patterns (`*`, `?`, `[`, `{`, `}`): no shell expands them, so they would reach the program literally.',
    fix: 'List the files explicitly, or quote the argument if the characters are data.',
  },
  {
    code: 'TR_COMMAND_SHELL',
    source: 'spec',
    spec: 'Forbidden Content: shell as language (Airlock: a shell such as sh, bash or zsh as the program).',
    fix: 'Run the interpreter of the declared language directly on a declared script.',
  },
  {
    code: 'TR_INTERPRETER',
    source: 'airlock',
    protects: 'the program is the declared language\'s interpreter, so `language` (never shell) says what actually runs',
    spec: 'Airlock: the first word is the interpreter of `language` (python: python|python3|python3.N; node: node + .js/.mjs/.cjs; ts: node + .ts/.mts/.cts; go: go run + .go; ruby: ruby + .rb), a bare name.',
    fix: 'Start the command with the interpreter named in the message and give it a script of that language.',
  },
  {
    code: 'TR_INLINE_CODE',
    source: 'airlock',
    protects: 'the code that runs is a declared input reviewed by hash, not a string in the command',
    spec: 'Airlock: no inline code or module flags (`-c`, `-e`, `--eval`, `-p`, `--print`, python `-m`): the code that runs must be a declared input reviewed by hash.',
    fix: 'Save the code as a script, declare it under inputs with its sha256, and run it by name.',
  },
  {
    code: 'TR_SCRIPT_NOT_INPUT',
    source: 'airlock',
    protects: 'the script that runs is one the approver saw with its hash',
    spec: 'Airlock: the script given to the interpreter is a declared input (relative names resolve in the working directory /in).',
    fix: 'Declare the script under inputs (name + sha256) and run it as `script.py` or `/in/script.py`.',
  },
  {
    code: 'TR_HOST_PATH',
    source: 'spec',
    spec: 'Forbidden Content: attempts to access host paths (Airlock: every absolute path in an argument, including `--opt=/path`, is under /in or /out).',
    fix: 'Declare the file as an input and use /in/<name>; write results under /out.',
  },
  {
    code: 'TR_PATH_TRAVERSAL',
    source: 'spec',
    spec: 'Forbidden Content: attempts to access host paths (Airlock: no `..` path segment in any argument).',
    fix: 'Use /in/<name> and /out/<path> directly.',
  },
  {
    code: 'TR_DEVICE',
    source: 'spec',
    spec: 'Forbidden Content: attempts to use privileged devices (Airlock: no /dev path in any argument).',
    fix: 'Remove the device path; stdout and stderr are captured by Airlock, files go under /out.',
  },
  // --- backend monty
  {
    code: 'TR_CODE_BLOCK',
    source: 'airlock',
    protects: 'Monty runs exactly one block of Python, the one the approver read; text around it or a second block would be ambiguous',
    spec: 'Airlock (backend monty): `## Code` holds non-empty Python code, plain or in exactly one ```python fence with nothing outside it.',
    fix: 'Put the Python code under `## Code`, optionally inside one ```python ... ``` block.',
  },
  // --- whole document
  {
    code: 'TR_PACKAGE_INSTALL',
    source: 'both',
    protects: 'an installer command cannot be told reliably from a negated mention, so both are refused: nothing outside the request gets installed',
    spec: 'Forbidden Content: instructions to install packages (Airlock: anywhere in the document, even negated, e.g. pip install, npm install, apt-get install).',
    fix: 'Remove the installer command; dependencies come with the sandbox image or as declared inputs.',
  },
  {
    code: 'TR_SECRET',
    source: 'spec',
    spec: 'Forbidden Content: embedded secrets.',
    fix: 'Remove the credential; a request never carries secrets (rotate it if it was real).',
  },
] as const;

export type ToolRequestCode = (typeof toolRequestRules)[number]['code'];

export const TOOL_REQUEST_WARNINGS = warningCodes(toolRequestRules);

/** Whether an error (not a warning) was reported since `start`: a warning leaves the value usable. */
export const hasErrorsSince = (problems: readonly Problem[], start: number): boolean => problems.slice(start).some((p) => !TOOL_REQUEST_WARNINGS.has(p.code));

/** A problem with a code this contract declares (a typo in a code is a compile error). */
export function trProblem(code: ToolRequestCode, message: string, line?: number, path?: string): Problem {
  const p: Problem = { code, message };
  if (line !== undefined) p.line = line;
  if (path !== undefined) p.path = path;
  return p;
}
