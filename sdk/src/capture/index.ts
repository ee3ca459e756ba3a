/**
 * gym-participant-sdk/capture (experimental): the worker side of token capture, for inference
 * engines that serve a policy model server. A worker stages each call's tokens and records
 * ({@link RolloutTokenCapture}), answers generation cuts with the staged prefix, and computes
 * the digests and fingerprints the model server checks. The shapes may change before 1.0.
 *
 * @see docs/policy-model.md
 * @experimental
 * @packageDocumentation
 */

export { CaptureError, RECORD_FAILURE_REASONS } from "./capture-error.js";
export type { CaptureErrorReason } from "./capture-error.js";
export { CaptureAdmissionSchema } from "./admission.js";
export type { CaptureAdmission, CaptureAdmissionInput } from "./admission.js";
export {
  CallRecordSchema,
  CommitCoordsSchema,
  StageResultSchema,
  StagedCallBaseSnapshotSchema,
  StagedCallRecordSchema,
  stagingKey,
} from "./records.js";
export type {
  Sealed,
  CallRecord,
  CommitCoords,
  StageResult,
  StagedCallBaseSnapshot,
  StagedCallRecord,
} from "./records.js";
export {
  EpisodeCutSchema,
  GenerationCutContinuationSchema,
  GenerationCutRecordSchema,
  generationCutRecordFromAck,
  remainingOutputLimit,
} from "./continuation.js";
export type { EpisodeCut, GenerationCutContinuation, GenerationCutRecord } from "./continuation.js";
export {
  GENERATION_CUT_ROUTE,
  GenerationCutInventorySchema,
  GenerationCutPrefixAckSchema,
  GenerationCutPrefixSchema,
  GenerationCutReceiptReplySchema,
  GenerationCutReceiptSchema,
  buildGenerationCutInventory,
  generationCutFailureAck,
  generationCutInventoryFromWire,
  inventoryDigest,
  validateReceiptFor,
} from "./generation-cut.js";
export type {
  GenerationCutReceiptReply,
  GenerationCutInventory,
  GenerationCutPrefix,
  GenerationCutPrefixAck,
  GenerationCutReceipt,
} from "./generation-cut.js";
export { FINGERPRINT_VERSION, assistantFingerprint, conversationDigest } from "./fingerprints.js";
export {
  EMPTY_EXTRAS_DIGEST,
  chainHash,
  extrasDigest,
  hashTokenIds,
  stagingDigest,
} from "./digests.js";
export type { StagingDigestInput } from "./digests.js";
export { PyFloat, pyFloat, pythonJson } from "./python-json.js";
export { RolloutTokenCapture } from "./worker-capture.js";
export type {
  ActiveCall,
  BeginCallOptions,
  CallTokens,
  RolloutTokenCaptureOptions,
  StagingSink,
  WeightVersionProvider,
} from "./worker-capture.js";
