/**
 * The registry of trusted JSON trees: containers the SDK validated once and deep-froze, with
 * what a validation walk would have found in them. The walk of a record skips a trusted
 * container, so a value is checked once in its life rather than at every commit.
 *
 * Why frozen: a trusted tree is never walked again, so nothing may change it afterwards, not
 * even an author still holding it. Only {@link frozenJson} (which builds the frozen copy
 * itself) registers trees; the registry is module-private and keyed weakly, so it holds
 * nothing alive.
 *
 * @module
 */

/** What the validation walk of a trusted container would find, recorded when it was trusted. */
export interface TrustedTree {
  /** The walk's rough size of the container's text (see `WalkState.chars` in json-value.ts). */
  readonly chars: number;
  /** Nesting levels of the container itself and below (1 for a container of scalars). */
  readonly height: number;
}

const trees = new WeakMap<object, TrustedTree>();

/** What the walk of `container` would find, when it is trusted; undefined otherwise. */
export function trustedTree(container: object): TrustedTree | undefined {
  return trees.get(container);
}

/**
 * Registers `container`, which the caller built, validated as plain JSON (no extended numbers)
 * and froze with everything under it.
 *
 * @internal
 */
export function trustTree(container: object, tree: TrustedTree): void {
  trees.set(container, tree);
}
