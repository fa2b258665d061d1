// One line of text from an untrusted source, made inert for a person's terminal or a line log.

// C0 (tab aside) and C1 controls, DEL (ESC sequences move the cursor, erase or conceal lines; CR
// overwrites one; LF forges a line of its own), line and paragraph separators, and bidi overrides,
// embeddings, isolates and marks (Trojan Source).
// eslint-disable-next-line no-control-regex -- matching control characters is the point
const UNSHOWABLE = /[\x00-\x08\x0a-\x1f\x7f-\x9f\u061c\u200e\u200f\u2028\u2029\u202a-\u202e\u2066-\u2069]/g;

/** `s` with every such character written as `\uXXXX`. */
export const inertLine = (s: string): string => s.replace(UNSHOWABLE, (c) => `\\u${c.charCodeAt(0).toString(16).padStart(4, '0')}`);
