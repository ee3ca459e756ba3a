/**
 * Attempts held by a participant, keyed by capture key and indexed by rollout, so a retire finds
 * the attempts it covers by looking up its rollout instead of scanning everything held: a retire
 * of every rollout a restore installed stays linear in the rollouts named.
 *
 * @module
 */
import { captureKey, fromCaptureKey, type EpisodeId } from "../identity/episode-id.js";
import { indexAdd, indexDelete } from "../util/multimap.js";

/**
 * A map from capture key to a value of that attempt, with the attempts of each rollout indexed.
 *
 * @example
 * const held = new AttemptMap<string>();
 * held.set({ rollout_id: "r", attempt: 1 }, "state");
 * held.covered({ rollout_id: "r", attempt: 2 }); // ["r-a1"]
 */
export class AttemptMap<V> implements Iterable<[string, V]> {
  readonly #entries = new Map<string, { readonly episode: EpisodeId; readonly value: V }>();
  readonly #byRollout = new Map<string, Set<string>>();

  /** Number of attempts held. */
  get size(): number {
    return this.#entries.size;
  }

  /** Whether the attempt with capture key `key` is held. */
  has(key: string): boolean {
    return this.#entries.has(key);
  }

  /** The value held for capture key `key`, or undefined. */
  get(key: string): V | undefined {
    return this.#entries.get(key)?.value;
  }

  /** The attempt held under capture key `key`, or undefined. */
  episode(key: string): EpisodeId | undefined {
    return this.#entries.get(key)?.episode;
  }

  /** Holds `value` for `episode` (replacing what was held for it); returns its capture key. */
  set(episode: EpisodeId, value: V): string {
    const key = captureKey(episode);
    this.#entries.set(key, { episode, value });
    indexAdd(this.#byRollout, episode.rollout_id, key);
    return key;
  }

  /** Drops the attempt with capture key `key`; whether it was held. */
  delete(key: string): boolean {
    const entry = this.#entries.get(key);
    if (entry === undefined) return false;
    this.#entries.delete(key);
    indexDelete(this.#byRollout, entry.episode.rollout_id, key);
    return true;
  }

  /** The capture keys of the held attempts of `episode`'s rollout up to `episode.attempt`. */
  covered(episode: EpisodeId): string[] {
    const keys = this.#byRollout.get(episode.rollout_id);
    if (keys === undefined) return [];
    const out: string[] = [];
    for (const key of keys) {
      if ((this.#entries.get(key)?.episode.attempt ?? Infinity) <= episode.attempt) out.push(key);
    }
    return out;
  }

  /** Drops the attempts {@link covered} names; returns their capture keys. */
  deleteCovered(episode: EpisodeId): string[] {
    const keys = this.covered(episode);
    for (const key of keys) this.delete(key);
    return keys;
  }

  /** The capture keys held, in insertion order. */
  keys(): IterableIterator<string> {
    return this.#entries.keys();
  }

  /** `[capture key, value]` pairs, in insertion order. */
  *[Symbol.iterator](): IterableIterator<[string, V]> {
    for (const [key, { value }] of this.#entries) yield [key, value];
  }
}

/**
 * A set of attempts, by capture key, with the attempts of each rollout indexed.
 *
 * @example
 * const pending = new AttemptSet();
 * pending.add({ rollout_id: "r", attempt: 1 });
 * pending.has("r-a1"); // true
 */
export class AttemptSet implements Iterable<string> {
  readonly #map = new AttemptMap<true>();

  /** Number of attempts held. */
  get size(): number {
    return this.#map.size;
  }

  /** Whether the attempt with capture key `key` is held. */
  has(key: string): boolean {
    return this.#map.has(key);
  }

  /** Adds an attempt, as an episode or its capture key; returns its capture key. */
  add(episode: EpisodeId | string): string {
    return this.#map.set(typeof episode === "string" ? fromCaptureKey(episode) : episode, true);
  }

  /** Drops the attempt with capture key `key`; whether it was held. */
  delete(key: string): boolean {
    return this.#map.delete(key);
  }

  /** The capture keys of the held attempts of `episode`'s rollout up to `episode.attempt`. */
  covered(episode: EpisodeId): string[] {
    return this.#map.covered(episode);
  }

  /** Drops the attempts {@link covered} names; returns their capture keys. */
  deleteCovered(episode: EpisodeId): string[] {
    return this.#map.deleteCovered(episode);
  }

  /** The capture keys held, in insertion order. */
  [Symbol.iterator](): IterableIterator<string> {
    return this.#map.keys();
  }
}
