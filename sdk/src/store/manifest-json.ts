/** The manifest's on-disk form: keys sorted at every level, indent 1, no trailing newline. */

function sortKeysDeep(value: unknown): unknown {
  if (Array.isArray(value)) return value.map(sortKeysDeep);
  if (value !== null && typeof value === "object") {
    const sorted: Record<string, unknown> = {};
    for (const key of Object.keys(value).sort()) {
      sorted[key] = sortKeysDeep((value as Record<string, unknown>)[key]);
    }
    return sorted;
  }
  return value;
}

/** Serializes a manifest the way the reference does (sorted keys, indent 1). */
export function serializeManifest(manifest: Record<string, unknown>): string {
  return JSON.stringify(sortKeysDeep(manifest), null, 1);
}

/** Field-by-field equality of two manifests (order-insensitive objects). */
export function sameManifest(a: Record<string, unknown>, b: Record<string, unknown>): boolean {
  return serializeManifest(a) === serializeManifest(b);
}
