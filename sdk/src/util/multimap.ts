/** Helpers for indexes kept as `Map<key, Set<value>>` whose entries leave with their last value. */

/** Adds `value` under `key`. */
export function indexAdd<K, V>(index: Map<K, Set<V>>, key: K, value: V): void {
  let set = index.get(key);
  if (set === undefined) index.set(key, (set = new Set()));
  set.add(value);
}

/** Removes `value` from `key`; the key leaves with its last value. */
export function indexDelete<K, V>(index: Map<K, Set<V>>, key: K, value: V): void {
  const set = index.get(key);
  if (set === undefined) return;
  set.delete(value);
  if (set.size === 0) index.delete(key);
}
