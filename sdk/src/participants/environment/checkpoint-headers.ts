/**
 * Reading the checkpoint headers a resources or agent server puts on its seed reply: header
 * names are matched case-insensitively, values exactly.
 *
 * @see docs/environment-server.md
 * @module
 */
import { RESTART_HEADER, VERIFY_HEADER } from "../../wire/checkpoint-headers.js";
import type { StepMode } from "../../steps/episode-steps.js";

/**
 * Reply headers as any client returns them: a fetch `Headers`, Node's `IncomingHttpHeaders`
 * (or supertest's `res.headers`), or a plain record with any name casing.
 */
export type ReplyHeaders =
  Headers | Readonly<Record<string, string | readonly string[] | number | undefined>>;

/**
 * The value of header `name` (case-insensitive) in `headers`, or null when absent. A repeated
 * header (an array value) yields null unless it has exactly one value.
 */
function headerValue(headers: ReplyHeaders | null | undefined, name: string): string | null {
  if (headers === null || headers === undefined) return null;
  if (typeof Headers !== "undefined" && headers instanceof Headers) return headers.get(name);
  const wanted = name.toLowerCase();
  for (const [key, value] of Object.entries(headers as Record<string, unknown>)) {
    if (key.toLowerCase() !== wanted || value === undefined) continue;
    if (Array.isArray(value)) return value.length === 1 ? String(value[0]) : null;
    return String(value);
  }
  return null;
}

/**
 * Whether a seed reply makes its episode a restart: header `x-ng-checkpoint-restart` (any name
 * casing) equal to exactly `1`. Anything else (absent, `true`, ` 1`, `01`) is not.
 *
 * @experimental
 */
export function isRestartReply(headers: ReplyHeaders | null | undefined): boolean {
  return headerValue(headers, RESTART_HEADER) === "1";
}

/**
 * The verify mode a resources server declared on its seed reply: `replay` iff header
 * `x-ng-checkpoint-verify` (any name casing) is exactly `replay`; otherwise `wait`.
 *
 * @experimental
 */
export function verifyModeOf(headers: ReplyHeaders | null | undefined): StepMode {
  return headerValue(headers, VERIFY_HEADER) === "replay" ? "replay" : "wait";
}
