// Owners of host state: see base/owner.ts (kept here for the ns lane's imports).
export { ownerAlive, ownerStamp, ownerTag, ownedTempDir, tagOwner } from '../../base/owner.js';
