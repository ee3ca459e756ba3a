/**
 * The capture keys of a scope (the parsed `episode_ids` of a commit or restore), computed once
 * per parsed list and shared by every reader of the same request: the control plane's scope
 * digest and replies, the participant's export (a filter, or a walk in key order), the
 * coordinator's message to its workers.
 *
 * Why: with 8,000 episodes in flight, each server keyed and sorted the same scope several times
 * per request, mostly in code still cold, even when nothing of it was held there.
 *
 * The cache is keyed by the list itself (a `WeakMap`, gone with the request): a scope is never
 * changed once parsed, which the `readonly` of every signature taking one says.
 *
 * @module
 */
import {
  captureKey,
  episodesInKeyOrder,
  fromCaptureKey,
  sortedUniqueKeys,
  type EpisodeId,
} from "./episode-id.js";

/** What is known of one scope, each part computed on first use. */
interface ScopeKeys {
  /** The capture key of each entry, in the scope's order (duplicates kept). */
  readonly keys: readonly string[];
  sorted: readonly string[] | null;
  ordered: readonly EpisodeId[] | null;
  set: ReadonlySet<string> | null;
  digest: string | null;
}

const cache = new WeakMap<readonly EpisodeId[], ScopeKeys>();

function keysOf(scope: readonly EpisodeId[]): ScopeKeys {
  let known = cache.get(scope);
  if (known === undefined) {
    known = { keys: scope.map(captureKey), sorted: null, ordered: null, set: null, digest: null };
    cache.set(scope, known);
  }
  return known;
}

/**
 * The capture key of each episode of `scope`, aligned with it (same order, duplicates kept).
 * Computed once per scope list.
 *
 * @example
 * captureKeysOf([episodeId("r", 1), episodeId("q")]); // ["r-a1", "q"]
 */
export function captureKeysOf(scope: readonly EpisodeId[]): readonly string[] {
  return keysOf(scope).keys;
}

/**
 * The capture keys of `scope` as a set, for "is this attempt in scope?". Computed once per
 * scope list: the control plane and the participant of one request share it.
 *
 * @example
 * captureKeySet([episodeId("r", 1)]).has("r-a1"); // true
 */
export function captureKeySet(scope: readonly EpisodeId[]): ReadonlySet<string> {
  const known = keysOf(scope);
  known.set ??= new Set(known.keys);
  return known.set;
}

/**
 * The capture keys of `scope`, sorted and de-duplicated (as `sortedCaptureKeys`). Computed once
 * per scope list, without sorting when the scope is already in key order.
 */
export function sortedScopeKeys(scope: readonly EpisodeId[]): readonly string[] {
  const known = keysOf(scope);
  // Both read-only: an ordered scope's sorted keys are its keys, shared.
  known.sorted ??= sortedUniqueKeys(known.keys);
  return known.sorted;
}

/**
 * The episodes of `scope` in capture-key order, each attempt once, aligned with
 * {@link sortedScopeKeys}: the scope itself when a controller sent it in that order (as ours
 * does), so a participant walks its state in key order without sorting it.
 */
export function scopeInKeyOrder(scope: readonly EpisodeId[]): readonly EpisodeId[] {
  const known = keysOf(scope);
  known.ordered ??= episodesInKeyOrder(scope, known.keys, sortedScopeKeys(scope));
  return known.ordered;
}

/**
 * The digest two requests compare to tell whether they name the same scope: the JSON of its
 * sorted capture keys, so order and duplicates do not count. `"null"` for no scope.
 */
export function scopeDigest(scope: readonly EpisodeId[] | null): string {
  if (scope === null) return "null";
  const known = keysOf(scope);
  known.digest ??= JSON.stringify(sortedScopeKeys(scope));
  return known.digest;
}

/**
 * The episodes of a list of capture keys (each decoded by `fromCaptureKey`, throwing
 * `InvalidEpisodeIdError` on a bad one), with the keys remembered as theirs: a scope that
 * crossed a process boundary as keys is not keyed again.
 */
export function scopeFromCaptureKeys(keys: readonly string[]): EpisodeId[] {
  const scope = keys.map(fromCaptureKey);
  cache.set(scope, { keys, sorted: null, ordered: null, set: null, digest: null });
  return scope;
}
