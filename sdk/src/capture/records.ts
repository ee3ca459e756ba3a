/**
 * Staged records and manifest rows: the token columns a worker stages, the
 * coordinates it answers with, and the token-free row the capture ledger keeps.
 *
 * A staged record is immutable once validated: parsing or building one freezes it and remembers
 * it, so later checks (a generation-cut snapshot in `beginCall`) trust it without hashing again.
 *
 * @module
 */
import { z } from "zod";
import { InvalidEpisodeIdError, fromCaptureKey } from "../identity/episode-id.js";
import { CaptureError } from "./capture-error.js";
import {
  EMPTY_EXTRAS_DIGEST,
  EXTRAS_DIGEST_VERSION,
  STAGING_DIGEST_VERSION,
  STAGING_SCHEMA_VERSION,
  extrasDigest,
  stagingDigest,
  type StagingDigestInput,
} from "./digests.js";
import { PyFloat } from "./python-json.js";
import {
  CaptureModeSchema,
  HexDigestSchema,
  IdentifierSchema,
  NonNegativeIntSchema,
  type CaptureMode,
} from "./wire-primitives.js";

/**
 * The default staging key of a staged record: `<rollout_id>/<model_call_id>`, where `rollout_id`
 * is the record's capture key (e.g. `r-a1/c3`).
 */
export function stagingKey(rolloutId: string, modelCallId: string): string {
  if (!rolloutId || !modelCallId) {
    throw new CaptureError("invalid_record", "rollout_id and model_call_id must be non-empty");
  }
  return `${rolloutId}/${modelCallId}`;
}

const versionShape = {
  schema_version: z.literal(STAGING_SCHEMA_VERSION).default(STAGING_SCHEMA_VERSION),
  digest_version: z.literal(STAGING_DIGEST_VERSION).default(STAGING_DIGEST_VERSION),
  extras_digest_version: z.literal(EXTRAS_DIGEST_VERSION).default(EXTRAS_DIGEST_VERSION),
};

const baseShape = {
  ...versionShape,
  rollout_id: IdentifierSchema,
  model_call_id: IdentifierSchema,
  parent_call_id: IdentifierSchema.nullable().default(null),
  mode: CaptureModeSchema,
  prev_len: NonNegativeIntSchema,
  delta_len: NonNegativeIntSchema,
  cum_len: NonNegativeIntSchema,
  weight_version: NonNegativeIntSchema,
  digest: HexDigestSchema,
  token_ids_delta: z.array(z.number().int()),
  token_mask_delta: z.array(z.number()),
  generation_log_probs_delta: z.array(z.number()),
  extras_digest: HexDigestSchema.default(EMPTY_EXTRAS_DIGEST),
  chain_hash: HexDigestSchema,
  cumulative_hash: HexDigestSchema,
};

/** The parent rules every staged record, coordinate and manifest row shares. */
function parentProblem(row: {
  parent_call_id: string | null;
  prev_len: number;
  mode?: CaptureMode;
}): string | null {
  const parentless = row.parent_call_id === null;
  if (parentless && row.prev_len !== 0) return "a parentless call must have prev_len == 0";
  if (!parentless && row.prev_len === 0) return "a child call must have prev_len > 0";
  if (row.mode === undefined) return null;
  if (parentless && row.mode !== "text") return "a parentless call must use text mode";
  if (!parentless && row.mode !== "token_in") return "a child call must use token_in mode";
  return null;
}

/** The base-snapshot rules, then the recomputed digest, in the reference's order. */
function checkBase(value: StagingDigestInput & { digest: string }, ctx: z.RefinementCtx): void {
  const issue = (message: string) => ctx.addIssue({ code: "custom", message, input: value });
  const parent = parentProblem(value as Parameters<typeof parentProblem>[0]);
  if (parent !== null) return issue(parent);
  if (value.delta_len === 0) return issue("a staged call delta must contain at least one token");
  if (value.token_ids_delta.some((id) => id < 0)) {
    return issue("token_ids_delta must be non-negative");
  }
  let actual: string;
  try {
    actual = stagingDigest(value);
  } catch (error) {
    if (error instanceof CaptureError) return issue(error.message);
    throw error;
  }
  if (actual !== value.digest) issue("digest does not match staged call contents");
}

const verified = new WeakSet<object>();

/** A deep copy of JSON-like extras, frozen, so a record's extras cannot drift from its digest. */
function frozenCopy(value: unknown): unknown {
  if (value === null || typeof value !== "object" || value instanceof PyFloat) return value;
  if (Array.isArray(value)) return Object.freeze(value.map(frozenCopy));
  const copy: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) {
    Object.defineProperty(copy, key, { value: frozenCopy(item), enumerable: true });
  }
  return Object.freeze(copy);
}

/** A parsed record: frozen, its arrays read-only. */
export type Sealed<T> = {
  readonly [K in keyof T]: T[K] extends (infer U)[] ? readonly U[] : T[K];
};

function seal<T extends object>(record: T): Sealed<T> {
  for (const value of Object.values(record)) if (Array.isArray(value)) Object.freeze(value);
  if ("extras" in record) {
    (record as { extras: unknown }).extras = frozenCopy(record.extras);
  }
  verified.add(Object.freeze(record));
  return record as Sealed<T>;
}

/**
 * A staged call's token columns and metadata, without the optional `extras` payload. Validation
 * recomputes the staging digest from the fields and the recorded `extras_digest`; it cannot check
 * extras it does not hold. Parsing freezes the result.
 */
export const StagedCallBaseSnapshotSchema = z
  .strictObject(baseShape)
  .superRefine(checkBase)
  .transform(seal);
/** A validated, frozen staged call without extras. */
export type StagedCallBaseSnapshot = z.output<typeof StagedCallBaseSnapshotSchema>;

/**
 * One staged call as a framework sink stores it: the base snapshot plus `extras` (an object or
 * null) whose digest must equal `extras_digest`. Parsing freezes the result, extras included.
 */
export const StagedCallRecordSchema = z
  .strictObject({
    ...baseShape,
    extras: z.record(z.string(), z.unknown()).nullable().default(null),
  })
  .superRefine((value, ctx) => {
    checkBase(value, ctx);
    let actual: string;
    try {
      actual = extrasDigest(value.extras);
    } catch (error) {
      if (!(error instanceof CaptureError)) throw error;
      ctx.addIssue({ code: "custom", message: error.message, input: value.extras });
      return;
    }
    if (actual !== value.extras_digest) {
      ctx.addIssue({
        code: "custom",
        message: "extras_digest does not match extras",
        input: value,
      });
    }
  })
  .transform(seal);
/** A validated, frozen staged call with its extras. */
export type StagedCallRecord = z.output<typeof StagedCallRecordSchema>;

/**
 * True when `value` is a staged record this process validated or built (and froze): its digest
 * need not be recomputed.
 *
 * @internal
 */
export function isVerifiedRecord(value: unknown): value is StagedCallBaseSnapshot {
  return typeof value === "object" && value !== null && verified.has(value);
}

/** What a builder supplies for a staged record; the lengths and digests are derived. */
export interface StagedCallComponents {
  readonly rollout_id: string;
  readonly model_call_id: string;
  readonly parent_call_id: string | null;
  readonly mode: CaptureMode;
  readonly prev_len: number;
  readonly weight_version: number;
  readonly token_ids_delta: readonly number[];
  readonly token_mask_delta: readonly number[];
  readonly generation_log_probs_delta: readonly number[];
  readonly extras: Readonly<Record<string, unknown>> | null;
  readonly chain_hash: string;
  readonly cumulative_hash: string;
}

/**
 * Builds a validated, frozen {@link StagedCallRecord} from its components, computing the extras
 * digest and the staging digest exactly once each (schema parsing would hash a second time).
 * `delta_len` is the token count and `cum_len` is `prev_len + delta_len`.
 *
 * Throws {@link CaptureError} `invalid_record` or `invalid_digest_input` when the components
 * break a record invariant (see {@link stagingDigest}).
 */
export function stagedCallRecordFromComponents(c: StagedCallComponents): StagedCallRecord {
  // Built once, whole, in the record's field order; the digest is filled in after hashing the
  // fields (an overwrite, not a new field: a spread plus more fields makes V8 build a slow
  // object, and a cut round builds thousands).
  const record = {
    schema_version: STAGING_SCHEMA_VERSION,
    digest_version: STAGING_DIGEST_VERSION,
    extras_digest_version: EXTRAS_DIGEST_VERSION,
    rollout_id: c.rollout_id,
    model_call_id: c.model_call_id,
    parent_call_id: c.parent_call_id,
    mode: c.mode,
    prev_len: c.prev_len,
    delta_len: c.token_ids_delta.length,
    cum_len: c.prev_len + c.token_ids_delta.length,
    weight_version: c.weight_version,
    token_ids_delta: [...c.token_ids_delta],
    token_mask_delta: [...c.token_mask_delta],
    generation_log_probs_delta: [...c.generation_log_probs_delta],
    extras_digest: extrasDigest(c.extras),
    chain_hash: c.chain_hash,
    cumulative_hash: c.cumulative_hash,
    digest: "",
    extras: c.extras,
  };
  record.digest = stagingDigest(record);
  // seal() keeps a frozen copy of the extras just digested.
  return seal(record) as StagedCallRecord;
}

/** The framework sink's answer to one staging request. */
export const StageResultSchema = z
  .strictObject({
    schema_version: versionShape.schema_version,
    ok: z.boolean(),
    staging_key: IdentifierSchema.nullable().default(null),
    error: z.string().nullable().default(null),
  })
  .superRefine((value, ctx) => {
    if (value.ok && value.staging_key === null) {
      ctx.addIssue({ code: "custom", message: "a successful stage result requires staging_key" });
    }
    if (!value.ok && !value.error) {
      ctx.addIssue({ code: "custom", message: "a failed stage result requires an error" });
    }
  });
/** The framework sink's answer to one staging request. */
export type StageResult = z.output<typeof StageResultSchema>;

/** The five fields a `staged` {@link CommitCoords} carries and a `capture_failed` one omits. */
const STAGED_PAYLOAD = [
  "digest",
  "extras_digest",
  "staging_key",
  "chain_hash",
  "cumulative_hash",
] as const;

/**
 * What a worker answers for one captured call: where its staged delta lies (`staged`), or that
 * capture failed (`capture_failed`: no payload fields, an empty delta).
 */
export const CommitCoordsSchema = z
  .strictObject({
    ...versionShape,
    rollout_id: IdentifierSchema,
    model_call_id: IdentifierSchema,
    parent_call_id: IdentifierSchema.nullable().default(null),
    prev_len: NonNegativeIntSchema,
    delta_len: NonNegativeIntSchema,
    cum_len: NonNegativeIntSchema,
    weight_version: NonNegativeIntSchema,
    disposition: z.enum(["staged", "capture_failed"]).default("staged"),
    digest: HexDigestSchema.nullable().default(null),
    extras_digest: HexDigestSchema.nullable().default(null),
    staging_key: IdentifierSchema.nullable().default(null),
    chain_hash: HexDigestSchema.nullable().default(null),
    cumulative_hash: HexDigestSchema.nullable().default(null),
  })
  .superRefine((value, ctx) => {
    const issue = (message: string) => ctx.addIssue({ code: "custom", message, input: value });
    const parent = parentProblem(value);
    if (parent !== null) return issue(parent);
    if (value.cum_len !== value.prev_len + value.delta_len) {
      return issue("cum_len must equal prev_len + delta_len");
    }
    const present = STAGED_PAYLOAD.filter((field) => value[field] !== null);
    if (value.disposition === "staged") {
      if (present.length !== STAGED_PAYLOAD.length) {
        return issue(
          "staged coordinates require digest, extras_digest, staging_key, chain_hash, and cumulative_hash",
        );
      }
      if (value.delta_len === 0) issue("staged coordinates require a non-empty delta");
    } else if (present.length > 0) {
      issue("capture_failed coordinates cannot carry staged payload metadata");
    } else if (value.delta_len !== 0) {
      issue("capture_failed coordinates cannot carry token deltas");
    }
  });
/** What a worker answers for one captured call. */
export type CommitCoords = z.output<typeof CommitCoordsSchema>;

/**
 * One token-free manifest row of a rollout's capture ledger. `capture_key` is set on rows a
 * restore carried over (the attempt that staged the call).
 */
export const CallRecordSchema = z
  .strictObject({
    ...versionShape,
    model_call_id: IdentifierSchema,
    parent_call_id: IdentifierSchema.nullable().default(null),
    prev_len: NonNegativeIntSchema,
    delta_len: NonNegativeIntSchema,
    cum_len: NonNegativeIntSchema,
    weight_version: NonNegativeIntSchema,
    digest: HexDigestSchema,
    extras_digest: HexDigestSchema,
    staging_key: IdentifierSchema,
    mode: CaptureModeSchema.default("token_in"),
    chain_hash: HexDigestSchema,
    cumulative_hash: HexDigestSchema,
    response_id: IdentifierSchema,
    admitted_at: z.number().nullable().default(null),
    output_fingerprint: HexDigestSchema.nullable().default(null),
    continuation_fingerprint: HexDigestSchema.nullable().default(null),
    fingerprint_version: NonNegativeIntSchema.default(0),
    capture_key: IdentifierSchema.nullable().default(null),
  })
  .superRefine((value, ctx) => {
    if (value.delta_len === 0 || value.cum_len !== value.prev_len + value.delta_len) {
      ctx.addIssue({
        code: "custom",
        message: "manifest lengths must describe a non-empty contiguous delta",
      });
      return;
    }
    const parent = parentProblem(value);
    if (parent !== null) ctx.addIssue({ code: "custom", message: parent });
  });
/** One token-free manifest row. */
export type CallRecord = z.output<typeof CallRecordSchema>;

/**
 * The capture key whose staged snapshot a manifest row names: the row's `capture_key` when set,
 * else the receipt's rollout ID. A `capture_key` must name the same rollout at the same or an
 * earlier attempt than the receipt's; otherwise this throws {@link CaptureError}
 * `foreign_capture_key` (a row from another rollout, or from the future, is never bound).
 */
export function manifestRowSourceKey(
  row: Pick<CallRecord, "capture_key" | "model_call_id">,
  receiptRolloutId: string,
): string {
  if (row.capture_key === null) return receiptRolloutId;
  const foreign = (why: string, cause?: unknown) =>
    new CaptureError(
      "foreign_capture_key",
      `manifest row ${row.model_call_id} names capture key '${row.capture_key}', ${why} of receipt '${receiptRolloutId}'`,
      cause === undefined ? undefined : { cause },
    );
  try {
    const source = fromCaptureKey(row.capture_key);
    const receipt = fromCaptureKey(receiptRolloutId);
    if (source.rollout_id !== receipt.rollout_id) throw foreign("not the rollout");
    if (source.attempt > receipt.attempt) throw foreign("a later attempt than that");
  } catch (error) {
    if (error instanceof InvalidEpisodeIdError) throw foreign("not a capture key", error);
    throw error;
  }
  return row.capture_key;
}
