/** `set-uid, sticky`: the set-id and sticky bits of a mode, in words (empty when it has none). */
export const privilegeBits = (mode: number): string => [mode & 0o4000 && 'set-uid', mode & 0o2000 && 'set-gid', mode & 0o1000 && 'sticky'].filter(Boolean).join(', ');
