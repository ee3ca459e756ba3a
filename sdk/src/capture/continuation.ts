/**
 * What a replacement call continues from (see docs/policy-model.md): the continuation a capture
 * admission carries, the cut record the checkpoint stores, and the output budget left.
 *
 * @module
 */
import { z } from "zod";
import { CaptureError } from "./capture-error.js";
import { hasOnlyKeys, isPlainRecord, shapeKeys } from "../util/plain-record.js";
import { HEX_DIGEST_PATTERN, STAGING_SCHEMA_VERSION } from "./digests.js";
import { conversationDigest } from "./fingerprints.js";
import type { GenerationCutPrefixAck } from "./generation-cut.js";
import {
  HexDigestSchema,
  IdentifierSchema,
  NonNegativeIntSchema,
  PositiveIntSchema,
  TerminalFinishReasonSchema,
  TerminalStopReasonSchema,
  allDistinct,
  parseWire,
} from "./wire-primitives.js";

/**
 * A checkpointed prefix of the same call, which the worker continues instead of regenerating
 * (`CaptureAdmission.generation_cut`). The worker fetches the staged record named by
 * `staging_keys`, checks it in `beginCall`, and generates only the rest, within
 * {@link remainingOutputLimit}. A terminal finish reason means the cut captured a finished
 * generation, returned without generating more.
 */
export const GenerationCutContinuationSchema = z
  .strictObject({
    schema_version: z.literal(STAGING_SCHEMA_VERSION).default(STAGING_SCHEMA_VERSION),
    source_capture_key: IdentifierSchema,
    source_model_call_id: IdentifierSchema,
    staging_keys: z.array(IdentifierSchema).min(1),
    prefix_token_count: NonNegativeIntSchema,
    prefix_digest: HexDigestSchema,
    effective_output_limit: PositiveIntSchema,
    terminal_finish_reason: TerminalFinishReasonSchema.nullable().default(null),
    terminal_stop_reason: TerminalStopReasonSchema.default(null),
  })
  .superRefine((value, ctx) => {
    if (!allDistinct(value.staging_keys)) {
      ctx.addIssue({ code: "custom", message: "generation-cut staging_keys must be unique" });
    }
    if (value.terminal_stop_reason !== null && value.terminal_finish_reason === null) {
      ctx.addIssue({
        code: "custom",
        message: "terminal_stop_reason requires terminal_finish_reason",
      });
    }
  });
/** A checkpointed prefix a replacement call continues. */
export type GenerationCutContinuation = z.output<typeof GenerationCutContinuationSchema>;

/**
 * How many tokens a continuation may still generate: the original call's budget
 * (`effective_output_limit`) minus the tokens its prefix already generated, never below 0, and 0
 * when the cut captured a finished generation. A continuation never asks the engine for more than
 * the original call had left.
 *
 * @example
 * remainingOutputLimit({ ...continuation, effective_output_limit: 1024, prefix_token_count: 5 });
 * // 1019
 */
export function remainingOutputLimit(
  continuation: Pick<
    GenerationCutContinuation,
    "effective_output_limit" | "prefix_token_count" | "terminal_finish_reason"
  >,
): number {
  if (continuation.terminal_finish_reason !== null) return 0;
  return Math.max(0, continuation.effective_output_limit - continuation.prefix_token_count);
}

/**
 * A durable prefix of an undelivered call and the request it answers, as a checkpoint stores it:
 * a restored cut is used only by a call whose `conversationDigest` equals `request_digest`.
 */
export const GenerationCutRecordSchema = z.strictObject({
  model_call_id: z.string(),
  request_digest: z.string(),
  continuation: GenerationCutContinuationSchema,
});
/** A durable prefix of an undelivered call and the request it answers. */
export type GenerationCutRecord = z.output<typeof GenerationCutRecordSchema>;

/** One undelivered call's cut in a gate snapshot; the newest `admitted_at` wins. */
export const EpisodeCutSchema = z.strictObject({
  capture_key: IdentifierSchema,
  record: GenerationCutRecordSchema,
  admitted_at: z.number().default(0),
});
/** One undelivered call's cut in a gate snapshot. */
export type EpisodeCut = z.output<typeof EpisodeCutSchema>;

/**
 * The cut record of one acknowledged call, built once when the receipt
 * arrives: the ack's evidence as the continuation, the source attempt's capture key, and the
 * conversation digest of the call's request items.
 *
 * Throws {@link CaptureError} `not_durable_prefix` for an ack that is not `durable_prefix`.
 */
export function generationCutRecordFromAck(
  ack: GenerationCutPrefixAck,
  source: {
    readonly captureKey: string;
    readonly requestItems: readonly unknown[] | null;
    /** `conversationDigest(requestItems)` when the caller computed it already. */
    readonly requestDigest?: string;
  },
): GenerationCutRecord {
  if (ack.disposition !== "durable_prefix") {
    throw new CaptureError(
      "not_durable_prefix",
      `call ${ack.model_call_id} has no durable prefix (${ack.disposition}); it regenerates after a restore`,
    );
  }
  const record = {
    model_call_id: ack.model_call_id,
    request_digest: source.requestDigest ?? conversationDigest(source.requestItems ?? []),
    continuation: {
      schema_version: STAGING_SCHEMA_VERSION,
      source_capture_key: source.captureKey,
      source_model_call_id: ack.model_call_id,
      staging_keys: ack.staging_keys,
      prefix_token_count: ack.prefix_token_count,
      prefix_digest: ack.prefix_digest,
      effective_output_limit: ack.effective_output_limit,
      terminal_finish_reason: ack.terminal_finish_reason,
      terminal_stop_reason: ack.terminal_stop_reason,
    },
  };
  // A durable ack (parsed with its schema) already meets every rule of the record but two: the
  // record's staging keys and source key must be non-empty. A round builds thousands of records,
  // so only a record that fails those goes through the schema (which then names the problem).
  if (
    source.captureKey.length > 0 &&
    ack.staging_keys.every((key) => key.length > 0) &&
    ack.prefix_token_count !== null &&
    ack.prefix_digest !== null &&
    ack.effective_output_limit !== null
  ) {
    return record as GenerationCutRecord;
  }
  const { schema_version: _version, ...continuation } = record.continuation;
  return parseWire(GenerationCutRecordSchema, { ...record, continuation }, "generation-cut record");
}

const RECORD_KEYS = shapeKeys(GenerationCutRecordSchema);
const CONTINUATION_KEYS = shapeKeys(GenerationCutContinuationSchema);

const isId = (value: unknown): value is string => typeof value === "string" && value.length > 0;
const isInt = (value: unknown, min: number): value is number =>
  typeof value === "number" && Number.isSafeInteger(value) && value >= min;

/**
 * The {@link GenerationCutRecord} {@link GenerationCutRecordSchema} would parse `value` into,
 * checked by hand (a property test holds the two equal); null when `value` breaks a rule, so the
 * schema decides and names it. A restore reads one per continued episode, in a fresh process
 * where zod's nested objects and refinements run cold.
 */
export function generationCutRecordFromWire(value: unknown): GenerationCutRecord | null {
  if (!isPlainRecord(value) || !hasOnlyKeys(value, RECORD_KEYS)) return null;
  const record = value;
  const { model_call_id: callId, request_digest: requestDigest } = record;
  if (typeof callId !== "string" || typeof requestDigest !== "string") return null;
  const c = record.continuation;
  if (!isPlainRecord(c) || !hasOnlyKeys(c, CONTINUATION_KEYS)) return null;
  const version = c.schema_version === undefined ? STAGING_SCHEMA_VERSION : c.schema_version;
  if (version !== STAGING_SCHEMA_VERSION) return null;
  if (!isId(c.source_capture_key) || !isId(c.source_model_call_id)) return null;
  const keys = c.staging_keys;
  if (!Array.isArray(keys) || keys.length === 0 || !keys.every(isId) || !allDistinct(keys)) {
    return null;
  }
  if (!isInt(c.prefix_token_count, 0) || !isInt(c.effective_output_limit, 1)) return null;
  if (typeof c.prefix_digest !== "string" || !HEX_DIGEST_PATTERN.test(c.prefix_digest)) return null;
  const finish = c.terminal_finish_reason === undefined ? null : c.terminal_finish_reason;
  if (finish !== null && finish !== "stop" && finish !== "length") return null;
  const stop = c.terminal_stop_reason === undefined ? null : c.terminal_stop_reason;
  if (stop !== null && typeof stop !== "string" && !isInt(stop, Number.MIN_SAFE_INTEGER)) {
    return null;
  }
  if (stop !== null && finish === null) return null;
  return {
    model_call_id: callId,
    request_digest: requestDigest,
    continuation: {
      schema_version: STAGING_SCHEMA_VERSION,
      source_capture_key: c.source_capture_key,
      source_model_call_id: c.source_model_call_id,
      staging_keys: [...(keys as string[])],
      prefix_token_count: c.prefix_token_count,
      prefix_digest: c.prefix_digest,
      effective_output_limit: c.effective_output_limit,
      terminal_finish_reason: finish,
      terminal_stop_reason: stop as string | number | null,
    },
  };
}
