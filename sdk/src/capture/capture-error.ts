/**
 * The one error type of the worker-side capture core. Capture errors are local: they never cross
 * the wire as an envelope. Callers match on {@link CaptureError.reason}, never on the message.
 *
 * @module
 */

/**
 * Why a capture operation refused. Grouped by who made the mistake:
 *
 * - the caller broke the capture lifecycle (`begin_call` checks, a second completion): the call is
 *   not poisoned, the caller has a bug;
 * - the token columns cannot form a valid record ({@link RECORD_FAILURE_REASONS}):
 *   `completeCall` turns these into `capture_failed` coordinates;
 * - a wire value, fingerprint input or generation-cut receipt is invalid.
 */
export type CaptureErrorReason =
  // begin_call, in check order
  | "invalid_admission"
  | "streaming_unsupported"
  | "invalid_prefix"
  | "invalid_weight_version"
  | "generation_cut_not_authorized"
  | "generation_cut_keys_mismatch"
  | "invalid_generation_cut_snapshot"
  | "generation_cut_identity_mismatch"
  | "generation_cut_lineage_mismatch"
  | "generation_cut_parent_tokens_mismatch"
  | "generation_cut_token_count_mismatch"
  | "generation_cut_policy_newer"
  | "generation_cut_snapshot_required"
  // completion lifecycle
  | "already_completed"
  // record content: complete_call degrades these to capture_failed
  | "prompt_mismatch"
  | "invalid_record"
  | "invalid_digest_input"
  // other inputs
  | "invalid_wire_value"
  | "invalid_fingerprint_input"
  | "not_durable_prefix"
  | "foreign_capture_key"
  // generation-cut receipt against the inventory sent
  | "receipt_inventory_mismatch"
  | "receipt_coverage_mismatch"
  | "receipt_identity_mismatch";

/**
 * The reasons that mean "these tokens cannot be staged", as opposed to a caller bug: the Python
 * reference raises `ValueError`/`TypeError` for them, and `complete_call` answers `capture_failed`.
 */
export const RECORD_FAILURE_REASONS: ReadonlySet<CaptureErrorReason> = new Set([
  "prompt_mismatch",
  "invalid_record",
  "invalid_digest_input",
]);

/**
 * A refusal of the capture core, with a machine-readable {@link CaptureErrorReason}.
 *
 * @example
 * try {
 *   capture.beginCall(admission, { stream: true });
 * } catch (error) {
 *   if (error instanceof CaptureError && error.reason === "streaming_unsupported") {
 *     // serve the call without token capture
 *   }
 * }
 */
export class CaptureError extends Error {
  override readonly name = "CaptureError";

  constructor(
    /** What went wrong, for code to switch on. */
    readonly reason: CaptureErrorReason,
    message: string,
    options?: ErrorOptions,
  ) {
    super(message, options);
  }

  /** True when the tokens cannot form a record (see {@link RECORD_FAILURE_REASONS}). */
  get recordFailure(): boolean {
    return RECORD_FAILURE_REASONS.has(this.reason);
  }
}
