import { stringify } from 'yaml';

/**
 * Renders front matter and sections so that parseFrontMatterDocument gives the same data and each
 * section's body (without surrounding blank lines) back.
 */
export function renderFrontMatterDocument(data: Record<string, unknown>, sections: { title: string; body: string }[]): string {
  const yaml = stringify(data, { lineWidth: 0, minContentWidth: 0, aliasDuplicateObjects: false, defaultStringType: 'QUOTE_DOUBLE', defaultKeyType: 'PLAIN' });
  const parts = ['---\n', yaml, '---\n'];
  for (const s of sections) parts.push(`\n## ${s.title}\n\n`, s.body.replace(/\n+$/, ''), s.body.trim() === '' ? '' : '\n');
  return parts.join('');
}
