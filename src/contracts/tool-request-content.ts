import type { Problem } from '../base/problem.js';
import { findSecrets } from './secrets.js';
import { trProblem } from './tool-request-rules.js';

/**
 * Whole-document rules: no package-install instructions and no embedded secrets, anywhere (front
 * matter, preamble, every section, `## Code` included).
 *
 * The install check is one precompiled regex over the text. It matches installer invocations
 * (`pip install`, `python -m pip`, `npm i`, `npx <pkg>`, `apt-get install`, `go get <module>`, ...),
 * also when the words are separated by list syntax as in `subprocess.run(["pip", "install", x])`.
 * It cannot tell an instruction from a negated mention ("no pip install needed"), so both are
 * refused: a request simply must not talk about installing packages.
 */
const SEP = `[\\s"',\\[\\]]+`;
// Within one line: for the rule with no verb to anchor it (`npx <anything>`), a separator across a line
// break would join a field that ends in "npx" to the next line's key (`purpose: "npx"` + `language:`).
// It misses an argv list split over lines (`"npx",` then `"pkg"` on the next line).
const SEP_LINE = `[ \\t"',\\[\\]]+`;
const INSTALLERS = [
  `pip(?:\\d(?:\\.\\d+)?)?${SEP}(?:install|download|wheel)\\b`,
  `pipx${SEP}(?:install|run|inject|upgrade)\\b`,
  `uvx\\b`,
  `uv${SEP}(?:pip|add|sync|tool${SEP}install)\\b`,
  `python(?:\\d(?:\\.\\d+)?)?${SEP}-m${SEP}(?:pip|ensurepip)\\b`,
  `easy_install\\b`,
  `(?:npm|pnpm|bun)${SEP}(?:install|i|ci|add|update|upgrade)\\b`,
  `yarn${SEP}(?:add|install|global)\\b`,
  `(?:npx|bunx|pnpx)${SEP_LINE}[@\\w]`,
  `pnpm${SEP}dlx\\b`,
  `apt(?:-get)?${SEP}(?:install|upgrade|dist-upgrade|build-dep)\\b`,
  `aptitude${SEP}install\\b`,
  `dpkg${SEP}(?:-i|--install)(?![\\w-])`,
  `rpm${SEP}(?:-i|-U|--install)`,
  `(?:yum|dnf|microdnf|zypper)${SEP}(?:install|in)\\b`,
  `apk${SEP}add\\b`,
  `pacman${SEP}-S`,
  `(?:brew|port|snap|choco|winget|scoop|deno)${SEP}install\\b`,
  `gem${SEP}install\\b`,
  `bundle${SEP}(?:install|add)\\b`,
  `go${SEP}(?:install|get)(?:${SEP}-\\S+)*${SEP}[\\w.-]+[./@]`,
  `cargo${SEP}(?:install|add)\\b`,
  `(?:conda|mamba|micromamba)${SEP}(?:install|create|env${SEP}create)\\b`,
  `poetry${SEP}(?:add|install)\\b`,
  `composer${SEP}(?:require|install)\\b`,
  `install-(?:package|module)\\b`,
];
// Speed: a cheap scan finds the tool names first; the full pattern is then tried only there (sticky).
const TOOL_RE =
  /\b(?:pip\d?(?:\.\d+)?|pipx|uvx?|python\d?(?:\.\d+)?|easy_install|npm|pnpm|bun|bunx|pnpx|yarn|npx|apt|apt-get|aptitude|dpkg|rpm|yum|dnf|microdnf|zypper|apk|pacman|brew|port|snap|choco|winget|scoop|deno|gem|bundle|go|cargo|conda|mamba|micromamba|poetry|composer|install-(?:package|module))\b/gi;
const INSTALL_AT = new RegExp(`(?:${INSTALLERS.join('|')})`, 'iy');

/** Calls `found` for each installer invocation (index, matched text) until it returns false. */
function eachInstall(text: string, found: (index: number, match: string) => boolean): void {
  TOOL_RE.lastIndex = 0;
  for (let t = TOOL_RE.exec(text); t !== null; t = TOOL_RE.exec(text)) {
    const before = text.charCodeAt(t.index - 1);
    if (before === 0x2e || before === 0x2d) continue; // `x.pip`, `my-npm`: part of another name
    INSTALL_AT.lastIndex = t.index;
    const m = INSTALL_AT.exec(text);
    if (m && !found(t.index, m[0])) break;
  }
  TOOL_RE.lastIndex = 0;
}

/** At most this many problems per code: a hostile document cannot flood the report. */
const MAX_REPORTED = 10;

/** Finds an installer invocation in `text` (exported for the command argv check and tests). */
export function findInstall(text: string): string | undefined {
  let first: string | undefined;
  eachInstall(text, (_i, m) => {
    first = m;
    return false;
  });
  return first;
}

/** Adds TR_PACKAGE_INSTALL and TR_SECRET problems for the whole document text. */
export function scanContent(text: string, problems: Problem[]): void {
  let line = 1;
  let scanned = 0;
  let count = 0;
  eachInstall(text, (index, match) => {
    for (let i = text.indexOf('\n', scanned); i !== -1 && i < index; i = text.indexOf('\n', i + 1)) line++;
    scanned = index;
    const shown = match.replace(/\s+/g, ' ').slice(0, 40);
    problems.push(trProblem('TR_PACKAGE_INSTALL', `\`${shown}\` is a package-install instruction; requests never install packages (remove it, even if negated)`, line));
    return ++count < MAX_REPORTED;
  });
  for (const f of findSecrets(text).slice(0, MAX_REPORTED)) {
    problems.push(trProblem('TR_SECRET', `line ${f.lineIndex + 1} holds what looks like a ${f.kind}; remove it (and rotate it if it is real)`, f.lineIndex + 1));
  }
}
