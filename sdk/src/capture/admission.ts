/**
 * The capture admission: the gate's contract with the inference worker for one
 * model call: who the call is, which parent it continues, and the exact token prefix its prompt
 * must start with.
 *
 * @module
 */
import { z } from "zod";
import { GenerationCutContinuationSchema } from "./continuation.js";
import { STAGING_SCHEMA_VERSION } from "./digests.js";
import {
  CaptureModeSchema,
  HexDigestSchema,
  IdentifierSchema,
  NonNegativeIntSchema,
} from "./wire-primitives.js";

/**
 * Gate-to-worker identity and exact-prefix contract for one model call.
 *
 * A `text` admission is a parentless root: no `parent_call_id`, `prev_len` 0, no prefix IDs, no
 * staging chain, no parent chain hash. A `token_in` admission continues a parent: it needs
 * `parent_call_id`, `prev_len > 0` and `parent_chain_hash`, and carries its prefix either inline
 * (`required_prefix_token_ids`, exactly `prev_len` of them) or as a non-empty `staging_chain`
 * naming the staged records whose deltas form it (the worker fetches those and passes the IDs to
 * `beginCall`). `generation_cut`, when set, names a checkpointed prefix of this same call to
 * continue.
 *
 * @example
 * CaptureAdmissionSchema.parse({ rollout_id: "r", model_call_id: "c1", mode: "text" });
 */
export const CaptureAdmissionSchema = z
  .strictObject({
    schema_version: z.literal(STAGING_SCHEMA_VERSION).default(STAGING_SCHEMA_VERSION),
    rollout_id: IdentifierSchema,
    model_call_id: IdentifierSchema,
    parent_call_id: IdentifierSchema.nullable().default(null),
    prev_len: NonNegativeIntSchema.default(0),
    mode: CaptureModeSchema,
    required_prefix_token_ids: z.array(z.number().int()).default([]),
    staging_chain: z.array(z.string()).default([]),
    parent_chain_hash: HexDigestSchema.nullable().default(null),
    generation_cut: GenerationCutContinuationSchema.nullable().default(null),
  })
  .superRefine((value, ctx) => {
    const issue = (message: string) => ctx.addIssue({ code: "custom", message, input: value });
    if (value.required_prefix_token_ids.some((id) => id < 0)) {
      return issue("required_prefix_token_ids must be non-negative");
    }
    if (value.mode === "token_in") {
      if (value.parent_call_id === null || value.prev_len === 0) {
        return issue("token_in admission requires a parent_call_id and prev_len > 0");
      }
      if (value.parent_chain_hash === null) {
        return issue("token_in admission requires the parent's chain hash");
      }
      // With a staging chain the worker fetches the prefix; the inline IDs may then be empty.
      if (
        value.staging_chain.length === 0 &&
        value.required_prefix_token_ids.length !== value.prev_len
      ) {
        issue("required_prefix_token_ids length must equal prev_len");
      }
    } else if (
      value.parent_call_id !== null ||
      value.prev_len !== 0 ||
      value.required_prefix_token_ids.length > 0 ||
      value.staging_chain.length > 0 ||
      value.parent_chain_hash !== null
    ) {
      issue("text admission must be a parentless root with no required prefix");
    }
  });
/** Gate-to-worker identity and exact-prefix contract for one model call. */
export type CaptureAdmission = z.output<typeof CaptureAdmissionSchema>;
/** A capture admission as sent on the wire (defaults may be omitted). */
export type CaptureAdmissionInput = z.input<typeof CaptureAdmissionSchema>;
