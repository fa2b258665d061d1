// Counts word frequencies in a text file and writes the top N as JSON.
// Usage: node word-freq.mjs /in/notes.txt --top 20 --out=/out/top-words.json
import { readFileSync, writeFileSync } from 'node:fs';

const args = process.argv.slice(2);
const source = args[0];
const top = args.includes('--top') ? Number(args[args.indexOf('--top') + 1]) : 10;
const out = args.find((a) => a.startsWith('--out='))?.slice('--out='.length) ?? '/out/top-words.json';

const counts = new Map();
for (const word of readFileSync(source, 'utf8').toLowerCase().match(/[\p{L}\p{N}']+/gu) ?? []) {
  counts.set(word, (counts.get(word) ?? 0) + 1);
}
const ranked = [...counts].sort((a, b) => b[1] - a[1] || a[0].localeCompare(b[0])).slice(0, top);
writeFileSync(out, JSON.stringify(Object.fromEntries(ranked), null, 2));
console.log(`${counts.size} distinct words, wrote top ${ranked.length}`);
