import { z } from "zod";

/** The pattern every rollout ID, capture key, checkpoint ID and path component matches. */
export const SAFE_ID_PATTERN = /^[A-Za-z0-9][A-Za-z0-9._-]*$/;

/** The reserved attempt suffix: `-a` and a positive decimal without a leading zero, at the end. */
const ATTEMPT_SUFFIX = /-a([1-9][0-9]*)$/;

declare const episodeIdBrand: unique symbol;

/**
 * One physical attempt of a logical rollout: `(rollout_id, attempt)`.
 *
 * Immutable and branded: only {@link parseEpisodeId}, {@link episodeId},
 * {@link fromCaptureKey} and {@link nextAttempt} mint one, so a value of this type has always
 * been validated. Compare with {@link sameEpisode}, not `===`.
 *
 * @example
 * const e = episodeId("task-3", 1);
 * captureKey(e); // "task-3-a1"
 */
export type EpisodeId = Readonly<{ rollout_id: string; attempt: number }> & {
  readonly [episodeIdBrand]: true;
};

/** Why a string or object names no episode. */
export class InvalidEpisodeIdError extends Error {
  override readonly name = "InvalidEpisodeIdError";
  constructor(
    readonly input: string,
    readonly reason: string,
  ) {
    super(`${JSON.stringify(input)} names no episode: ${reason}`);
  }
}

/**
 * A valid rollout ID in one test: {@link SAFE_ID_PATTERN} not ending with the attempt suffix.
 * Why: every entry of a scope of thousands of episodes is checked, often by code still cold;
 * one regex test per ID instead of two.
 */
const VALID_ROLLOUT_ID = /^[A-Za-z0-9][A-Za-z0-9._-]*(?<!-a[1-9][0-9]*)$/;

/** The reason `rolloutId` is not a valid rollout ID, or null when it is. */
export function rolloutIdProblem(rolloutId: string): string | null {
  if (VALID_ROLLOUT_ID.test(rolloutId)) return null;
  if (rolloutId.length === 0) return "the rollout ID is empty";
  if (!SAFE_ID_PATTERN.test(rolloutId)) {
    return "a rollout ID must match ^[A-Za-z0-9][A-Za-z0-9._-]*$";
  }
  if (ATTEMPT_SUFFIX.test(rolloutId)) {
    return "a rollout ID must not end with the reserved attempt suffix -a<N>";
  }
  return null;
}

function mint(rolloutId: string, attempt: number): EpisodeId {
  return Object.freeze({ rollout_id: rolloutId, attempt }) as EpisodeId;
}

/**
 * Builds an EpisodeId, throwing {@link InvalidEpisodeIdError} when the rollout ID is invalid or
 * the attempt is not a non-negative integer.
 *
 * @example
 * const first = episodeId("task-7-0"); // { rollout_id: "task-7-0", attempt: 0 }
 * captureKey(nextAttempt(first)); // "task-7-0-a1"
 *
 * @default attempt 0
 */
export function episodeId(rolloutId: string, attempt = 0): EpisodeId {
  const problem = rolloutIdProblem(rolloutId);
  if (problem !== null) throw new InvalidEpisodeIdError(rolloutId, problem);
  if (!Number.isSafeInteger(attempt) || attempt < 0) {
    throw new InvalidEpisodeIdError(rolloutId, `attempt ${attempt} is not an integer >= 0`);
  }
  return mint(rolloutId, attempt);
}

/**
 * The wire form of an EpisodeId: `{"rollout_id": "<id>", "attempt": <int>}`; `attempt` defaults
 * to 0 when absent; extra properties and non-integer attempts are refused. Parses into the
 * branded {@link EpisodeId}.
 */
export const EpisodeIdSchema = z
  .strictObject({
    rollout_id: z
      .string()
      .regex(SAFE_ID_PATTERN, "a rollout ID must match ^[A-Za-z0-9][A-Za-z0-9._-]*$")
      .superRefine((value, ctx) => {
        const problem = rolloutIdProblem(value);
        if (problem !== null) ctx.addIssue({ code: "custom", message: problem });
      }),
    attempt: z.number().int().min(0).max(Number.MAX_SAFE_INTEGER).default(0),
  })
  .transform((value) => mint(value.rollout_id, value.attempt))
  .meta({
    id: "EpisodeId",
    description: "One physical attempt of a logical rollout.",
    example: { rollout_id: "task-7-0", attempt: 1 },
  });

/** Parses the wire form of an EpisodeId, throwing {@link InvalidEpisodeIdError} when invalid. */
export function parseEpisodeId(value: unknown): EpisodeId {
  // The hand check accepts exactly what the schema does; only a refusal needs the schema's words.
  const fast = episodeIdFromWire(value);
  if (fast !== null) return fast;
  const result = EpisodeIdSchema.safeParse(value);
  if (!result.success) {
    throw new InvalidEpisodeIdError(
      JSON.stringify(value) ?? String(value),
      result.error.issues.map((issue) => issue.message).join("; "),
    );
  }
  return result.data;
}

/**
 * The EpisodeId of a wire value, or null when it is not one: the same rules as
 * {@link EpisodeIdSchema} without zod's overhead (read once per stored record on restore).
 */
export function episodeIdFromWire(value: unknown): EpisodeId | null {
  if (value === null || typeof value !== "object" || Array.isArray(value)) return null;
  const { rollout_id: rolloutId, attempt = 0 } = value as {
    rollout_id?: unknown;
    attempt?: unknown;
  };
  if (typeof rolloutId !== "string" || !VALID_ROLLOUT_ID.test(rolloutId)) return null;
  if (typeof attempt !== "number" || !Number.isSafeInteger(attempt) || attempt < 0) return null;
  // A plain loop, not `some` with a closure: this runs per entry of a scope, mostly cold.
  const keys = Object.keys(value);
  if (keys.length > 2) return null;
  for (let i = 0; i < keys.length; i++) {
    if (keys[i] !== "rollout_id" && keys[i] !== "attempt") return null;
  }
  return mint(rolloutId, attempt);
}

/**
 * The EpisodeIds of a wire array, or null when any entry is not one ({@link episodeIdFromWire}
 * for each): the fast path for control bodies listing thousands of episodes.
 */
export function episodeIdsFromWire(values: readonly unknown[]): EpisodeId[] | null {
  const out = new Array<EpisodeId>(values.length);
  for (let i = 0; i < values.length; i++) {
    const episode = episodeIdFromWire(values[i]);
    if (episode === null) return null;
    out[i] = episode;
  }
  return out;
}

/** The capture key of an episode: `r` for attempt 0, `r-aN` otherwise. */
export function captureKey(e: EpisodeId): string {
  return e.attempt === 0 ? e.rollout_id : `${e.rollout_id}-a${e.attempt}`;
}

/**
 * Decodes a capture key: a trailing `-a<N>` (N positive, no leading zero) is the attempt, the
 * rest the rollout ID; without it the attempt is 0. Throws {@link InvalidEpisodeIdError} when the
 * result is not a valid EpisodeId (e.g. `r-a1-a2`, `-a1`, `.x`, the empty string).
 */
export function fromCaptureKey(key: string): EpisodeId {
  const match = ATTEMPT_SUFFIX.exec(key);
  const rolloutId = match === null ? key : key.slice(0, match.index);
  const attempt = match === null ? 0 : Number(match[1]);
  const problem = rolloutIdProblem(rolloutId);
  if (problem !== null) throw new InvalidEpisodeIdError(key, problem);
  if (!Number.isSafeInteger(attempt)) {
    throw new InvalidEpisodeIdError(key, "the attempt number is too large");
  }
  return mint(rolloutId, attempt);
}

/** The same rollout's next attempt: how a restored episode continues. */
export function nextAttempt(e: EpisodeId): EpisodeId {
  return mint(e.rollout_id, e.attempt + 1);
}

/**
 * Attempt `attempt` of `e`'s rollout. The rollout ID was validated when `e` was minted, so only
 * the attempt is checked: cheaper than {@link episodeId} where thousands are built in a row.
 *
 * @throws {@link InvalidEpisodeIdError} when `attempt` is not a safe integer >= 0
 */
export function attemptOf(e: EpisodeId, attempt: number): EpisodeId {
  if (!Number.isSafeInteger(attempt) || attempt < 0) {
    throw new InvalidEpisodeIdError(e.rollout_id, `attempt ${attempt} is not an integer >= 0`);
  }
  return mint(e.rollout_id, attempt);
}

/** Whether two EpisodeIds name the same attempt. */
export function sameEpisode(a: EpisodeId, b: EpisodeId): boolean {
  return a.rollout_id === b.rollout_id && a.attempt === b.attempt;
}

/** The wire form (always with `attempt`), as a fresh plain object. */
export function episodeIdToWire(e: EpisodeId): { rollout_id: string; attempt: number } {
  return { rollout_id: e.rollout_id, attempt: e.attempt };
}

/**
 * Sorted, de-duplicated capture keys of a list of episodes (by UTF-16 code units, as
 * `Array.prototype.sort` orders strings). Keys already in strictly ascending order, as a
 * controller's scope and records exported in key order usually are, are returned as listed:
 * one pass checks the order, nothing is sorted.
 */
export function sortedCaptureKeys(episodes: Iterable<EpisodeId>): string[] {
  // A fresh array either way: returned as listed or sorted, it is the caller's.
  return sortedUniqueKeys(Array.from(episodes, captureKey)) as string[];
}

/**
 * `episodes` in capture-key order, each attempt once, given their capture keys (aligned):
 * `episodes` itself when the keys are already strictly ascending (one pass), else a sorted copy.
 * `sorted` is `sortedUniqueKeys(keys)` when the caller has it already (not sorted again).
 */
export function episodesInKeyOrder(
  episodes: readonly EpisodeId[],
  keys: readonly string[],
  sorted: readonly string[] = sortedUniqueKeys(keys),
): readonly EpisodeId[] {
  if (sorted === keys) return episodes;
  const byKey = new Map<string, EpisodeId>();
  for (let i = 0; i < keys.length; i++) byKey.set(keys[i] as string, episodes[i] as EpisodeId);
  return sorted.map((key) => byKey.get(key) as EpisodeId);
}

/**
 * `keys` sorted and de-duplicated: `keys` itself when already strictly ascending (checked in
 * one pass), else a sorted copy without duplicates.
 */
export function sortedUniqueKeys(keys: readonly string[]): readonly string[] {
  for (let i = 1; i < keys.length; i++) {
    if (!((keys[i - 1] as string) < (keys[i] as string))) return [...new Set(keys)].sort();
  }
  return keys;
}
