/**
 * The zod schema of an opaque JSON payload ({@link JsonPayloadSchema}), which the wire schemas
 * of records and kinds' bodies use, and the switch a restore uses to pass payloads it just
 * decoded through unchecked.
 *
 * @module
 */
import { z } from "zod";
import { NotJsonError, assertJsonValue, type JsonValue } from "./json-value.js";

let trustedDecoding = 0;

/**
 * Runs `fn` (synchronously) with {@link JsonPayloadSchema} passing values through unchecked.
 * Internal: only for validating records just produced by {@link decodeJson}, which are JSON by
 * construction, so a restore does not walk every payload a second time.
 *
 * @internal
 */
export function withDecodedPayloadsTrusted<T>(fn: () => T): T {
  trustedDecoding += 1;
  try {
    return fn();
  } finally {
    trustedDecoding -= 1;
  }
}

/**
 * zod schema for an opaque JSON payload. Accepts exactly what {@link assertJsonValue} accepts
 * and passes the input through unchanged (same reference, no copy); otherwise fails with a
 * custom issue whose message is the {@link NotJsonError} message (path + "not JSON").
 *
 * Built on `z.unknown()` rather than `z.custom()` so OpenAPI/JSON-Schema generation still
 * works (it renders as an unconstrained schema).
 */
export const JsonPayloadSchema: z.ZodType<JsonValue> = z.unknown().superRefine((value, ctx) => {
  // Values decodeJson produced are JSON by construction: not checked again (restore speed).
  if (trustedDecoding > 0) return;
  try {
    assertJsonValue(value);
  } catch (e) {
    if (!(e instanceof NotJsonError)) throw e;
    ctx.addIssue({ code: "custom", message: e.message, input: value });
  }
}) as unknown as z.ZodType<JsonValue>;
