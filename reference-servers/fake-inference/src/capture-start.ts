/**
 * Beginning a captured call on the worker side: resolve the parent
 * prefix a `token_in` admission names from the token store, fetch the staged prefix a continued
 * cut names, and let `beginCall` check both against the admission.
 *
 * @module
 */
import {
  CaptureError,
  CommitCoordsSchema,
  type ActiveCall,
  type CaptureAdmission,
  type CommitCoords,
  type RolloutTokenCapture,
} from "./sdk-capture.js";
import { TokenStoreError, type TokenStore } from "./token-store.js";

/** How a captured call began: active, or failed before it could begin (it still generates). */
export type CaptureStart =
  | { readonly kind: "active"; readonly call: ActiveCall }
  | { readonly kind: "failed"; readonly reason: string; readonly coords: CommitCoords };

/**
 * The `capture_failed` coordinates of an admission no active call exists for: nothing staged,
 * an empty delta.
 */
export function refusedCoords(admission: CaptureAdmission, weightVersion: number): CommitCoords {
  return CommitCoordsSchema.parse({
    rollout_id: admission.rollout_id,
    model_call_id: admission.model_call_id,
    parent_call_id: admission.parent_call_id,
    prev_len: admission.prev_len,
    delta_len: 0,
    cum_len: admission.prev_len,
    weight_version: weightVersion,
    disposition: "capture_failed",
  });
}

/** Inputs of {@link startCapture}. */
export interface StartCaptureInput {
  readonly capture: RolloutTokenCapture;
  readonly store: TokenStore;
  readonly admission: CaptureAdmission;
  readonly weightVersion: number;
}

/**
 * Begins a captured call. A staged record that is missing or corrupt, or a `beginCall` refusal,
 * fails the call's capture (never its generation): the reason is `token_store_miss` or the
 * {@link CaptureError} reason.
 */
export async function startCapture(input: StartCaptureInput): Promise<CaptureStart> {
  const { admission } = input;
  const failed = (reason: string): CaptureStart => ({
    kind: "failed",
    reason,
    coords: refusedCoords(admission, input.weightVersion),
  });
  try {
    const chain = admission.staging_chain;
    const prefixTokenIds =
      admission.mode === "token_in" && chain.length > 0
        ? await input.store.prefixOf(chain)
        : undefined;
    const cut = admission.generation_cut;
    if (cut === null) {
      return { kind: "active", call: input.capture.beginCall(admission, { prefixTokenIds }) };
    }
    // This backend stages each cut under one key; a prefix split over several is not ours.
    if (cut.staging_keys.length !== 1) return failed("generation_cut_keys_unsupported");
    const snapshot = await input.store.get(cut.staging_keys[0] as string);
    const call = input.capture.beginCall(admission, {
      prefixTokenIds,
      generationCut: snapshot,
      generationCutStagingKeys: cut.staging_keys,
    });
    return { kind: "active", call };
  } catch (error) {
    if (error instanceof TokenStoreError) return failed("token_store_miss");
    if (error instanceof CaptureError) return failed(error.reason);
    throw error;
  }
}
