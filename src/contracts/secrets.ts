/**
 * Embedded-secret detection shared by every document that must not carry secrets.
 *
 * How: well-known credential formats (cloud keys, VCS and chat tokens, PEM private keys, JWTs,
 * credentials in URLs, bearer headers) plus `name = value` assignments whose name says secret and
 * whose value looks random (length >= 8, not a placeholder).
 * What it misses: secrets in an unknown format with an innocent name, split or encoded secrets
 * (base64 of a key, a key spread over lines), and short or low-entropy passwords without a name.
 */
export interface SecretFinding {
  /** 0-based index of the line in the text given. */
  lineIndex: number;
  kind: string;
  /** A masked preview: never the secret itself. */
  preview: string;
}

const PATTERNS: { kind: string; re: RegExp }[] = [
  { kind: 'private key block', re: /-----BEGIN ((RSA|EC|DSA|OPENSSH|ENCRYPTED|PGP) )?PRIVATE KEY( BLOCK)?-----/ },
  { kind: 'AWS access key id', re: /\b(AKIA|ASIA)[0-9A-Z]{16}\b/ },
  { kind: 'AWS secret access key', re: /aws_?secret_?access_?key["']?\s*[:=]\s*["']?[A-Za-z0-9/+=]{40}/i },
  { kind: 'GitHub token', re: /\b(gh[pousr]_[A-Za-z0-9]{36,}|github_pat_[A-Za-z0-9_]{22,})\b/ },
  { kind: 'GitLab token', re: /\bglpat-[A-Za-z0-9_-]{20,}\b/ },
  { kind: 'Slack token', re: /\bxox[abposr]-[A-Za-z0-9-]{10,}\b/ },
  { kind: 'Stripe key', re: /\b[rs]k_live_[A-Za-z0-9]{16,}\b/ },
  { kind: 'Google API key', re: /\bAIza[0-9A-Za-z_-]{35}\b/ },
  { kind: 'AI provider API key', re: /\bsk-(proj-|ant-[a-z0-9]+-)?[A-Za-z0-9_-]{20,}\b/ },
  { kind: 'JSON Web Token', re: /\beyJ[A-Za-z0-9_-]{8,}\.eyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}/ },
  { kind: 'bearer token', re: /\bBearer\s+[A-Za-z0-9._~+/-]{16,}=*/ },
  { kind: 'credentials in a URL', re: /\b[a-z][a-z0-9+.-]*:\/\/[^/\s:@]+:[^/\s@]{3,}@/i },
];

const NAMED_SECRET =
  /\b(password|passwd|pwd|secret|token|api[_-]?key|apikey|access[_-]?key|private[_-]?key|client[_-]?secret|auth[_-]?token)["']?\s*[:=]\s*["']?([^\s"',;]{8,})/i;
const PLACEHOLDER = /^(\*+|x+|<[^>]*>|\$\{?[A-Za-z_][A-Za-z0-9_]*\}?|\{\{.*\}\}|redacted|changeme|example|none|null|true|false)$/i;

function mask(s: string): string {
  return `${s.slice(0, 4)}…(${s.length} chars)`;
}

function looksRandom(value: string): boolean {
  if (PLACEHOLDER.test(value)) return false;
  const classes = [/[a-z]/, /[A-Z]/, /[0-9]/, /[^A-Za-z0-9]/].filter((re) => re.test(value)).length;
  return classes >= 2 || value.length >= 16;
}

/** `\s` of a JS regex, as a code unit test. */
function isSpace(c: number): boolean {
  return c === 32 || (c >= 9 && c <= 13) || c === 0xa0 || c === 0x1680 || (c >= 0x2000 && c <= 0x200a) ||
    c === 0x2028 || c === 0x2029 || c === 0x202f || c === 0x205f || c === 0x3000 || c === 0xfeff;
}

/** Last letters of every name NAMED_SECRET and the AWS secret pattern accept (password, passwd, pwd, ...). */
const NAME_ENDINGS = ['key', 'token', 'secret', 'wd', 'word'];

/** True when `s` before `end` ends with `lower` (lower-case ASCII), ignoring the case of ASCII letters. */
function endsWithFolded(s: string, end: number, lower: string): boolean {
  const from = end - lower.length;
  if (from < 0) return false;
  for (let k = 0; k < lower.length; k++) {
    const c = s.charCodeAt(from + k);
    if ((c >= 0x41 && c <= 0x5a ? c | 0x20 : c) !== lower.charCodeAt(k)) return false;
  }
  return true;
}

/** Whether the `:` or `=` at `at` follows a secret-looking name as in `name["']?\s*[:=]`. */
function followsSecretName(s: string, at: number): boolean {
  let i = at;
  while (i > 0 && isSpace(s.charCodeAt(i - 1))) i--;
  const q = s.charCodeAt(i - 1);
  if (q === 34 || q === 39) i--;
  const last = s.charCodeAt(i - 1) | 0x20; // every ending ends in d, n, t or y (either case)
  if (last !== 0x64 && last !== 0x6e && last !== 0x74 && last !== 0x79) return false;
  for (let k = 0; k < NAME_ENDINGS.length; k++) if (endsWithFolded(s, i, NAME_ENDINGS[k] as string)) return true;
  return false;
}

/**
 * Necessary condition for a finding, cheap enough to run on the whole text and then per line.
 * The named-value, AWS-secret and URL-credential patterns all need a `:` or `=` right after a name
 * (or `://`), so they are found from the few separators instead of a case-insensitive word scan
 * at every position. The other patterns start with case-sensitive prefixes: one regex.
 */
const TOKEN_PREFIXES = /BEGIN|A[KS]IA|AIza|Bearer|gh[pousr]_|github_pat_|glpat-|xox|k_live_|sk-|eyJ/;
function mayHoldSecret(s: string): boolean {
  for (let p = s.indexOf(':'); p !== -1; p = s.indexOf(':', p + 1)) {
    if (s.startsWith('//', p + 1) || followsSecretName(s, p)) return true;
  }
  for (let p = s.indexOf('='); p !== -1; p = s.indexOf('=', p + 1)) if (followsSecretName(s, p)) return true;
  return TOKEN_PREFIXES.test(s);
}

export function findSecrets(text: string): SecretFinding[] {
  const findings: SecretFinding[] = [];
  if (!mayHoldSecret(text)) return findings;
  const lines = text.split('\n');
  lines.forEach((line, lineIndex) => {
    if (!mayHoldSecret(line)) return;
    for (const { kind, re } of PATTERNS) {
      const m = re.exec(line);
      if (m) {
        findings.push({ lineIndex, kind, preview: mask(m[0]) });
        return;
      }
    }
    const named = NAMED_SECRET.exec(line);
    if (named?.[2] && looksRandom(named[2])) findings.push({ lineIndex, kind: `value of "${named[1]}"`, preview: mask(named[2]) });
  });
  return findings;
}
