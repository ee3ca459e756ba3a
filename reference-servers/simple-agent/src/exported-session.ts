/**
 * What the Simple Agent's export hook writes per native session, and how a restore checks it.
 *
 * @module
 */
import { z } from "zod";
import { ObservationBundleSchema } from "./trajectory.js";

/** What the export hook writes per native session (the SDK adds its own counters). */
export const ExportedSessionSchema = z.strictObject({
  request: z.unknown(),
  resources_cookies: z.record(z.string(), z.string()).nullable(),
  observations: ObservationBundleSchema.nullable(),
});

export type ExportedSession = z.infer<typeof ExportedSessionSchema>;

/**
 * {@link ExportedSessionSchema}'s verdict on a restored session. Sessions this agent exported
 * have no observations until their first activation ends and one cookie jar of strings: those
 * are checked by hand (a restore reads thousands), anything else by the schema, which also
 * words every refusal.
 */
export function exportedSessionOf(
  value: unknown,
): { success: true; data: ExportedSession } | z.ZodSafeParseError<ExportedSession> {
  if (value !== null && typeof value === "object" && !Array.isArray(value)) {
    const { request, resources_cookies: cookies, observations } = value as Record<string, unknown>;
    const keys = Object.keys(value);
    if (
      keys.length === 3 &&
      request !== undefined &&
      observations === null &&
      (cookies === null || isStringRecord(cookies)) &&
      keys.every(
        (key) => key === "request" || key === "resources_cookies" || key === "observations",
      )
    ) {
      return { success: true, data: value as ExportedSession };
    }
  }
  return ExportedSessionSchema.safeParse(value);
}

/** A plain object whose every own value is a string (what `z.record(z.string(), z.string())` takes). */
function isStringRecord(value: unknown): value is Record<string, string> {
  if (value === null || typeof value !== "object") return false;
  const proto: unknown = Object.getPrototypeOf(value);
  if (proto !== Object.prototype && proto !== null) return false;
  // The schema drops an own `__proto__` key from a record: left to it.
  if (Object.hasOwn(value, "__proto__")) return false;
  for (const item of Object.values(value)) if (typeof item !== "string") return false;
  return true;
}
