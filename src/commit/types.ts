import type { Problem } from '../base/problem.js';
import type { ScopeRecord } from './scopes.js';

/**
 * Promotion, rollback and recovery of an Action Descriptor's verified filesystem diff (issue 5,
 * docs/promotion.md). Types and the stable codes every refusal carries.
 */

export const commitRules = [
  { code: 'COMMIT_BAD_ID', spec: 'A sandbox id is 1-128 of A-Z a-z 0-9 . _ : - starting with a letter or digit.', fix: 'Give the sandbox id `airlock run` printed (sbx-...).' },
  { code: 'COMMIT_NO_RUN', spec: 'Only a sandbox run recorded in the workspace can be promoted, confirmed or rolled back.', fix: 'Check the id and --workspace; runs live in WORKSPACE/runs/<sandbox_id>/.' },
  { code: 'COMMIT_RESULT_INVALID', spec: 'Invalid results must never be promoted (sandbox-result §13): the Sandbox Result is re-validated, alone and against its descriptor.', fix: 'Run the descriptor again; a result that fails its own contract is never applied.' },
  { code: 'COMMIT_NO_RECORD', spec: 'Promotion works from the run record the host wrote (runs/<id>/record.json: the Action, its door, its decision), for every door.', fix: 'The run predates run records, or it is one step of a composite: run the action again, or promote the composite.' },
  { code: 'COMMIT_NO_SCOPE', spec: 'Only an action with a declared scope changes real files; its /out is the run\'s output, never promoted.', fix: 'Nothing to promote: the run\'s outputs are in WORKSPACE/runs/<id>/out.' },
  { code: 'COMMIT_POLICY', spec: 'Promotion reads the host policy (operators, approval expiry, tombstone retention).', fix: 'Fix WORKSPACE/policy.yaml (`airlock policy check`).' },
  { code: 'COMMIT_LOCKED', spec: 'Promotions, rollbacks and recovery of one workspace run one at a time (WORKSPACE/promotions/.lock).', fix: 'Wait for the other airlock command to finish, then try again.' },
  { code: 'COMMIT_INTERRUPTED', spec: 'A promotion or rollback interrupted by a crash must be recovered before anything else is applied.', fix: 'Run `airlock recover`; it says whether each one went back to the old state or on to the new one.' },
  { code: 'COMMIT_AUDIT_FAILED', spec: 'Every promotion, confirmation, rollback and recovery is in the audit log; a decision that cannot be recorded is not made (fail closed).', fix: 'Run `airlock audit verify` (and `--repair` for an interrupted append), then try again.' },
  { code: 'PROMOTE_VERDICT', spec: 'Promotion only when the verdict allows it: PROMOTE, or REQUIRE_CONFIRMATION with an operator\'s signed confirmation. BLOCK and FORCE_ROLLBACK never promote.', fix: 'A BLOCKed run is never applied: change the action and run it again.' },
  { code: 'PROMOTE_COMPOSITE_CHILD', spec: 'MULTI_STEP_COMPOSITE: promotion and rollback cover the composite as one unit; a child step is never promoted alone.', fix: 'Promote the composite\'s sandbox id (`airlock run` printed it).' },
  { code: 'PROMOTE_NEEDS_CONFIRMATION', spec: 'REQUIRE_CONFIRMATION promotes only with `airlock confirm SANDBOX_ID --operator NAME`.', fix: 'Have an operator listed in the policy review the diff and run `airlock confirm`.' },
  { code: 'PROMOTE_ALREADY_DONE', spec: 'A sandbox run is promoted once (a promotion record keyed by sandbox id, created atomically).', fix: 'Nothing to do; to apply the action again, run its descriptor again (a new sandbox id).' },
  { code: 'PROMOTE_PREIMAGE_CHANGED', spec: 'Before touching anything every pre-image is re-checked: a modified or deleted file still has the diff\'s sha256_before, an added path still does not exist.', fix: 'The real file changed since the run: run the descriptor again on the current tree.' },
  { code: 'COMMIT_NO_SAFE_WRITER', spec: 'Every host read and write inside a scope goes through the scope agent (dist/native/airlock-scopefs): without it nothing is promoted, rolled back or recovered.', fix: 'Build it: `npm run build` with a C compiler (apt-get install gcc libc6-dev).' },
  { code: 'COMMIT_NO_SCOPE_RECORD', spec: 'Promotion acts only on the scope roots the run recorded (runs/<id>/scopes.json: inode and owner of each root).', fix: 'The run predates scope records or its folder is damaged: run the descriptor again.' },
  { code: 'COMMIT_SCOPE_ROOT', spec: 'Promotion, rollback and recovery act only in scopes the host policy allows now (scope_roots, read at that moment, not at the run): a root the operator removed is not written again.', fix: 'Leave it so, or put the root back in WORKSPACE/policy.yaml scope_roots and run the command again.' },
  { code: 'PROMOTE_SCOPE_CHANGED', spec: 'Promotion, rollback and recovery act only in the scope root the run acted on: same inode, same owner.', fix: 'The scope directory was replaced or changed owner since the run: run the action again on the tree as it is now.' },
  { code: 'PROMOTE_PATH_UNSAFE', spec: 'Promotion, rollback and recovery reach every path from the scope root one component at a time, never through a symbolic link or a mount point at any component.', fix: 'Remove the link from the path (or scope the action to the real directory) and run again.' },
  { code: 'PROMOTE_PATH_CHANGED', spec: 'A directory on the way to a changed path must stay the inode it was when planned (or when the promotion recorded it): a swapped directory stops the whole operation.', fix: 'Something replaced a directory inside the scope while Airlock worked: find out what, then promote, roll back or recover again. A recovery that keeps failing on a folder its owner replaced for good: `airlock recover --abandon SANDBOX_ID` ends it, leaving that folder as it is (audited).' },
  { code: 'PROMOTE_PRIVILEGE_BITS', spec: 'No privilege comes out of a sandbox: a diff that adds or keeps set-uid, set-gid or sticky bits is never applied (the judge BLOCKs it first).', fix: 'Change the action so it does not set set-uid, set-gid or sticky bits.' },
  { code: 'PROMOTE_UNRESTORABLE_MODE', spec: 'A rollback must be able to restore every old state: a modified or deleted entry whose mode has set-uid, set-gid or sticky bits now is never changed (the agent never writes those bits back; the judge BLOCKs it first, FS_UNRESTORABLE_MODE).', fix: 'Have the entry\'s owner or root clear the bits first (chmod u-s,g-s,o-t PATH), then run the action again; or change that entry without Airlock.' },
  { code: 'PROMOTE_FOREIGN_OWNER', spec: 'Promotion changes or removes only files and directories owned by the scope\'s owner (whose authority it writes with).', fix: 'Scope the action to a tree its owner owns, or have that file\'s owner act on it.' },
  { code: 'PROMOTE_FOREIGN_GROUP', spec: 'A file written or restored by promotion or rollback is a new file of the scope\'s owner, so it can keep its group only when the owner may set it (one of the owner\'s groups): a modified file or a deleted entry in another group is never changed (its group could be neither kept nor restored).', fix: 'Add the owner to that group, or have root give the file one of the owner\'s groups (chgrp), then run the action again; or change that file without Airlock.' },
  { code: 'PROMOTE_UNSUPPORTED_ENTRY', spec: 'Promotion applies regular files and directories; links, fifos, sockets, devices and type changes are never applied.', fix: 'Change the action so it only writes, modifies or deletes regular files and directories.' },
  { code: 'PROMOTE_CONTENT_MISSING', spec: 'The new content comes from the blob store (WORKSPACE/blobs/<sha256>) and is re-hashed before use.', fix: 'The run\'s kept content is gone or damaged: run the descriptor again.' },
  { code: 'PROMOTE_TOMBSTONE_FAILED', spec: 'Deleted and overwritten files go into the tombstone store (content-addressed, outside every scope) before they are replaced.', fix: 'Make WORKSPACE/tombstones writable and with free space, then try again.' },
  { code: 'PROMOTE_PRECONDITION_FAILED', spec: 'Preconditions (paths_exist, network_available) are checked again at promotion; a failing one blocks it.', fix: 'Make the precondition true (the path exists, the network is up), or run a new descriptor.' },
  { code: 'PROMOTE_PRECONDITION_UNCHECKABLE', spec: 'A precondition Airlock cannot check on this host (user_idle: true on a server without a session idle source) blocks promotion.', fix: 'Declare user_idle: false, or promote on a host that can tell whether its user is idle.' },
  { code: 'PROMOTE_COOLDOWN', spec: 'confirmation.cooldown_on_repeat: after a rollback the same declaration cannot be promoted again before the cooldown has passed.', fix: 'Wait until the time given, then run and promote again.' },
  { code: 'PROMOTE_APPLY_FAILED', spec: 'Applying is all-or-nothing: an error halfway undoes what was done (the old state stays).', fix: 'Read the error (permissions, space), fix it and promote again.' },
  { code: 'CONFIRM_VERDICT', spec: 'Only a REQUIRE_CONFIRMATION verdict can be confirmed by a person.', fix: 'PROMOTE needs no confirmation; BLOCK and FORCE_ROLLBACK cannot be confirmed.' },
  { code: 'CONFIRM_CHANGED', spec: 'A person signs the diff they were shown: when the run\'s diff changed between showing and signing, nothing is signed.', fix: 'Run `airlock confirm` again and read the diff it shows.' },
  { code: 'CONFIRM_KEY', spec: 'A confirmation is signed with the operator\'s Ed25519 key (same keys as approval).', fix: 'Run `airlock keygen --operator NAME` or pass --key-dir.' },
  { code: 'CONFIRM_INVALID', spec: 'A confirmation is an Ed25519 signature by a key the policy lists, over the sandbox id, action id and the diff\'s sha256.', fix: 'Confirm again with `airlock confirm`; the stored confirmation is damaged, forged or for another diff.' },
  { code: 'CONFIRM_EXPIRED', spec: 'A confirmation expires after the policy\'s approval.expiry_hours.', fix: 'Confirm again.' },
  { code: 'ROLLBACK_NOT_PROMOTED', spec: 'Only an applied promotion can be rolled back.', fix: 'Check the sandbox id with `airlock history ACTION_ID`.' },
  { code: 'ROLLBACK_ALREADY_DONE', spec: 'A promotion is rolled back once.', fix: 'Nothing to do.' },
  { code: 'ROLLBACK_CONFLICT', spec: 'Rollback refuses, naming the file, when a file the promotion touched changed since; --force keeps that newer version in the tombstones and rolls back anyway.', fix: 'Look at the file; rerun with --force to restore the promoted-over state (the newer version is kept as a tombstone).' },
  { code: 'ROLLBACK_CONTENT_MISSING', spec: 'Rollback restores from the tombstone store, re-hashing every pre-image.', fix: 'The tombstone is gone or damaged: restore it from a backup; nothing was changed.' },
  { code: 'ROLLBACK_FAILED', spec: 'An error halfway through a rollback leaves a journal that `airlock recover` completes.', fix: 'Fix the error (permissions, space) and run `airlock recover`; if it cannot be fixed, `airlock recover --abandon SANDBOX_ID` ends it, leaving what it could not do as it is (audited).' },
  { code: 'RECOVER_NOT_IN_FLIGHT', spec: '`airlock recover --abandon SANDBOX_ID` ends only a promotion or rollback that is in flight (promotions/inflight/<sandbox_id>).', fix: 'Run `airlock recover` to list what is in flight; give one of those sandbox ids.' },
] as const;

export type CommitCode = (typeof commitRules)[number]['code'];

/** What a path holds (or must hold): a regular file with its content hash, or a directory. */
export interface PathState {
  type: 'file' | 'dir';
  /** file only */
  sha256?: string;
  /** permission bits (& 0o7777) */
  mode: number;
  uid: number;
  gid: number;
  /** file only: restored on rollback so a restored file is the file it was. */
  mtime?: { sec: number; nsec: number };
  atime?: { sec: number; nsec: number };
}

/** One change of a promotion: the path goes from `before` to `after` (null: absent). */
export interface JournalOp {
  path: string;
  kind: 'added' | 'modified' | 'deleted';
  before: PathState | null;
  after: PathState | null;
}

export type Phase = 'applying' | 'applied' | 'aborted' | 'rolling_back' | 'rolled_back';

/** WORKSPACE/promotions/<sandbox_id>/journal.json: the write-ahead journal and the promotion record. */
export interface Journal {
  version: 2;
  sandbox_id: string;
  action_id: string;
  /** Child action ids of a composite (one unit). */
  child_action_ids: string[];
  /** sha256 of the canonical JSON of the Sandbox Result's filesystem_diff. */
  diff_sha256: string;
  /** sha256 of sandbox-result.json's bytes. */
  result_sha256: string;
  /** sha256 of the descriptor minus its volatile fields (the cooldown key). */
  declaration_sha256: string;
  cooldown_on_repeat: boolean;
  verdict: string;
  /** Who confirmed a REQUIRE_CONFIRMATION verdict. */
  confirmed_by?: string;
  /** Random per attempt: staging file names and the audit record that is the commit point. */
  token: string;
  actor: string;
  phase: Phase;
  started_at: string;
  applied_at?: string;
  rolled_back_at?: string;
  /** The scopes the ops are in, as the run recorded them: each is reached through its own agent. */
  scopes: ScopeRecord[];
  /** Directories (absolute) on the way to the ops, with the inode they had when planned. */
  dirs: Record<string, string>;
  /** Apply order; undo is the reverse. */
  ops: JournalOp[];
  /** rollback --force: newer versions kept in the tombstones (path -> sha256). */
  forced?: { path: string; sha256: string | null; type: string }[];
  rollback_actor?: string;
  /** The rollback was --force: recovery finishes it without the promotion's directory pins too. */
  rollback_force?: boolean;
  rollback_token?: string;
  audit?: { promoted?: number; rolled_back?: number };
  /** `airlock recover --abandon`: an operator ended this interrupted operation; these paths were left as they were. */
  abandoned?: { at: string; actor: string; left_undone: { path: string; code: string; message: string }[] };
}

export type CommitFailure = { ok: false; problems: Problem[] };
export type CommitResult<T> = ({ ok: true } & T) | CommitFailure;

export const fail = (code: CommitCode, message: string, path?: string): CommitFailure => ({ ok: false, problems: [{ code, message, ...(path ? { path } : {}) }] });
