/** Header names of the checkpoint contract. Exact. */

/** On every session-start reply of a resources server: `wait` or `replay`. */
export const VERIFY_HEADER = "x-ng-checkpoint-verify";
/** On session-start replies of a `restart_only` resources server: `1`. */
export const RESTART_HEADER = "x-ng-checkpoint-restart";
/** Sent by a caller on a replayable `/verify` when its `/close_session` follows: `1`. */
export const CLOSE_FOLLOWS_HEADER = "x-ng-checkpoint-close-follows";
