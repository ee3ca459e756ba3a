/**
 * Clock skew between the controller and each participant. Deadlines travel as absolute Unix
 * seconds, so a participant whose clock is off sees every deadline early or late. Discovery
 * measures each participant's offset from its status reply; coordination then sends each one its
 * deadlines in its own clock, and refuses to open a checkpoint when an offset is beyond a bound.
 *
 * @see docs/controller.md ("Clock skew")
 */

/** Offsets larger than this (either way) refuse prepare and restore by default, in ms. */
export const DEFAULT_MAX_CLOCK_SKEW_MS = 5_000;

/**
 * Offsets at most this large are not corrected, in ms: below it a correction is noise, and
 * participants on one host keep receiving the same bytes.
 */
export const MIN_CLOCK_CORRECTION_MS = 100;

/** What one timed status probe saw. */
export interface ClockProbe {
  /** The controller's clock when the request was sent, in ms (`Date.now()`). */
  readonly sentMs: number;
  /** The controller's clock when the reply had arrived, in ms. */
  readonly receivedMs: number;
  /** The reply's `now` field: the server's clock when it answered, in Unix seconds. */
  readonly serverNow?: unknown;
  /** The reply's `Date` header (whole seconds), used when `now` is missing. */
  readonly dateHeader?: string | readonly string[] | undefined;
}

/** A participant's clock measured against the controller's. */
export interface ClockEstimate {
  /** The participant's clock minus the controller's, in ms (positive: it is ahead). */
  readonly offsetMs: number;
  /** How far the true offset may be from `offsetMs`, in ms (half the round trip, plus rounding). */
  readonly uncertaintyMs: number;
  /** The probe's round trip, in ms. */
  readonly roundTripMs: number;
  /** Where the participant's time came from: the status reply's `now`, or its `Date` header. */
  readonly source: "status" | "date";
}

/**
 * Estimates a participant's clock offset from one probe: its time when it answered minus the
 * midpoint of the request's sending and the reply's arrival (the reply is assumed to be made
 * halfway through the round trip, so the error is at most half of it). The status reply's `now`
 * has millisecond resolution; the `Date` header only whole seconds, truncated, so it is taken
 * as the middle of its second and 500 ms are added to the uncertainty. Null when the reply
 * carries neither.
 */
export function estimateClockOffset(probe: ClockProbe): ClockEstimate | null {
  const roundTripMs = Math.max(0, probe.receivedMs - probe.sentMs);
  const midpointMs = probe.sentMs + roundTripMs / 2;
  if (typeof probe.serverNow === "number" && Number.isFinite(probe.serverNow)) {
    return {
      offsetMs: probe.serverNow * 1000 - midpointMs,
      uncertaintyMs: roundTripMs / 2,
      roundTripMs,
      source: "status",
    };
  }
  const header = Array.isArray(probe.dateHeader) ? probe.dateHeader[0] : probe.dateHeader;
  const dateMs = typeof header === "string" ? Date.parse(header) : Number.NaN;
  if (!Number.isFinite(dateMs)) return null;
  return {
    offsetMs: dateMs + 500 - midpointMs,
    uncertaintyMs: roundTripMs / 2 + 500,
    roundTripMs,
    source: "date",
  };
}

/**
 * What to add to a deadline sent to a participant with this offset, in ms: the offset itself,
 * or 0 when it is unknown, within its own uncertainty or at most {@link MIN_CLOCK_CORRECTION_MS}.
 */
export function deadlineCorrectionMs(
  offsetMs: number | undefined,
  uncertaintyMs: number | undefined = 0,
): number {
  if (offsetMs === undefined || !Number.isFinite(offsetMs)) return 0;
  if (Math.abs(offsetMs) <= Math.max(uncertaintyMs, MIN_CLOCK_CORRECTION_MS)) return 0;
  return Math.round(offsetMs);
}

/** `deadlineTs` (controller's clock, Unix seconds) in a clock `correctionMs` ahead. */
export function translateDeadline(deadlineTs: number, correctionMs: number): number {
  if (correctionMs === 0) return deadlineTs;
  // To the microsecond: the sum of a float and a correction must not print as 17 digits.
  return Math.round((deadlineTs + correctionMs / 1000) * 1e6) / 1e6;
}

/** Seconds with one decimal, for people. */
function seconds(ms: number): string {
  const value = Math.abs(ms) / 1000;
  return Number.isInteger(value) ? String(value) : value.toFixed(1);
}

/** "counter's clock is 61.2 s ahead of this controller's (bound 5 s): synchronise …". */
export function describeSkew(server: string, offsetMs: number, boundMs: number): string {
  const direction = offsetMs >= 0 ? "ahead of" : "behind";
  return (
    `${server}'s clock is ${seconds(offsetMs)} s ${direction} this controller's ` +
    `(bound ${seconds(boundMs)} s): synchronise clocks (chrony/NTP)`
  );
}
