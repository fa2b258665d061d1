export { openAuditLog, type AuditLog, type AuditLogOptions } from './log.js';
export { canonicalJson, recordHash } from './canonical.js';
export { auditPaths } from './files.js';
export { verifyLines } from './verify.js';
export * from './types.js';
