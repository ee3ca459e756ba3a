/**
 * The worker-side capture helpers this backend uses (see docs/policy-model.md), gathered in
 * one module so the rest of the backend names them in one place.
 *
 * @module
 */
export { CaptureAdmissionSchema, type CaptureAdmission } from "gym-participant-sdk/capture";
export { CaptureError } from "gym-participant-sdk/capture";
export {
  GENERATION_CUT_ROUTE,
  GenerationCutInventorySchema,
  GenerationCutPrefixAckSchema,
  GenerationCutReceiptSchema,
  generationCutFailureAck,
  generationCutInventoryFromWire,
  inventoryDigest,
  validateReceiptFor,
  type GenerationCutInventory,
  type GenerationCutPrefix,
  type GenerationCutPrefixAck,
  type GenerationCutReceipt,
} from "gym-participant-sdk/capture";
export {
  CommitCoordsSchema,
  StagedCallRecordSchema,
  stagingKey,
  type CommitCoords,
  type StageResult,
  type StagedCallRecord,
} from "gym-participant-sdk/capture";
export {
  RolloutTokenCapture,
  type ActiveCall,
  type StagingSink,
} from "gym-participant-sdk/capture";
