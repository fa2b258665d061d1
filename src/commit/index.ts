export { commitRules, type CommitCode, type Journal, type JournalOp, type PathState, type Phase } from './types.js';
export { loadRun, diffHash, type LoadedRun } from './load.js';
export { promote, forceRollback, type PromoteOptions, type PromoteOutcome } from './promote.js';
export { rollback, type RollbackOptions, type RollbackOutcome } from './rollback.js';
export { recover, type RecoverReport, type Recovered } from './recover.js';
export { history, type HistoryLine } from './history.js';
export { pruneTombstones, type PruneReport } from './tombstones.js';
export { confirm } from './confirm.js';
export { checkPreconditions, type HostProbe } from './preconditions.js';
