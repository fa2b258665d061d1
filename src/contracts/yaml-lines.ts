import { isMap, isPair, isScalar, isSeq, type Node } from 'yaml';

/**
 * The offset of the deepest node of a parsed YAML document that exists on `path` (the key's
 * offset for mapping entries), for turning a field path into a line number.
 */
export function yamlOffsetOf(root: unknown, path: readonly (string | number)[]): number {
  let node: unknown = root;
  let offset = 0;
  for (const seg of path) {
    if (isMap(node)) {
      const pair = node.items.find((p) => isPair(p) && isScalar(p.key) && p.key.value === seg);
      if (!pair) break;
      offset = (pair.key as Node).range?.[0] ?? offset;
      node = pair.value;
    } else if (isSeq(node) && typeof seg === 'number') {
      const item = node.items[seg];
      if (!item) break;
      offset = (item as Node).range?.[0] ?? offset;
      node = item;
    } else break;
  }
  return offset;
}
