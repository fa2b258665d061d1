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

/**
 * Every pattern above contains one of these words, so a text without any of them has no finding.
 * One scan of the whole text keeps the common case (no secret) cheap.
 */
const PREFILTER = /BEGIN|A[KS]IA|aws|gh[pousr]_|github_pat_|glpat-|xox|k_live_|AIza|sk-|eyJ|bearer|:\/\/|pass|pwd|secret|token|key/i;

export function findSecrets(text: string): SecretFinding[] {
  const findings: SecretFinding[] = [];
  if (!PREFILTER.test(text)) return findings;
  const lines = text.split('\n');
  lines.forEach((line, lineIndex) => {
    if (!PREFILTER.test(line)) return;
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
