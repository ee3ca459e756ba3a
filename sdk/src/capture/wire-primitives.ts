/**
 * The zod building blocks the capture wire models share. Strict like the reference's pydantic
 * `StrictInt`/`StrictStr`: no coercion, and `z.number()` already refuses NaN and ±Infinity.
 *
 * @module
 */
import { z } from "zod";
import { CaptureError } from "./capture-error.js";
import { HEX_DIGEST_PATTERN } from "./digests.js";

/** A non-empty string. */
export const IdentifierSchema = z.string().min(1);
/** An integer ≥ 0 (within the safe-integer range). */
export const NonNegativeIntSchema = z.number().int().min(0);
/** An integer ≥ 1. */
export const PositiveIntSchema = z.number().int().min(1);
/** A lowercase SHA-256 hex digest. */
export const HexDigestSchema = z
  .string()
  .regex(HEX_DIGEST_PATTERN, "must be a lowercase SHA-256 hex digest");
/** How a call's prompt reached the worker: `text` (a root) or `token_in` (continues a parent). */
export const CaptureModeSchema = z.enum(["token_in", "text"]);
/** How a call's prompt reached the worker. */
export type CaptureMode = z.infer<typeof CaptureModeSchema>;

/** True when `items` holds no value twice. */
export function allDistinct(items: readonly unknown[]): boolean {
  return new Set(items).size === items.length;
}

/**
 * Parses `value` with `schema`, or throws {@link CaptureError} `invalid_wire_value` naming every
 * problem by path (the zod error is its `cause`).
 */
export function parseWire<S extends z.ZodType>(
  schema: S,
  value: unknown,
  what: string,
): z.output<S> {
  const result = schema.safeParse(value);
  if (result.success) return result.data;
  const problems = result.error.issues
    .map((issue) => `${issue.path.length > 0 ? issue.path.join(".") : what}: ${issue.message}`)
    .join("; ");
  throw new CaptureError("invalid_wire_value", `invalid ${what}: ${problems}`, {
    cause: result.error,
  });
}

/** Why a cut's generation already finished: it stopped, or it reached its length limit. */
export const TerminalFinishReasonSchema = z.enum(["stop", "length"]);

/** A stop string or stop token ID; only with a terminal finish reason. */
export const TerminalStopReasonSchema = z.union([z.string(), z.number().int()]).nullable();
