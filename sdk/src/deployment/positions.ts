/**
 * Places in a parsed YAML document: the line a problem is reported at, found by walking the
 * document along a path of keys and indexes.
 */
import { isMap, isScalar, isSeq, type Document, type LineCounter } from "yaml";

/** A mapping key as text (YAML keys may be scalars of any type). */
export function keyText(node: unknown): string {
  if (isScalar(node)) return String(node.value);
  return String(node);
}

/** The offset a node starts at, or null for a node without a source range. */
export function startOf(node: unknown): number | null {
  const range = (node as { range?: [number, number, number] } | null)?.range;
  return range === undefined ? null : range[0];
}

/** Finds the deepest node along `segments` and the line of the key (or item) that holds it. */
export function locate(
  doc: Document,
  lines: LineCounter,
  segments: readonly PropertyKey[],
): { line: number; node: unknown; found: boolean } {
  let node: unknown = doc.contents;
  let offset = startOf(node);
  let found = true;
  for (const segment of segments) {
    if (isMap(node)) {
      // The last pair wins, as when the document is read.
      const pair = node.items.findLast((item) => keyText(item.key) === String(segment));
      if (pair === undefined) {
        found = false;
        break;
      }
      offset = startOf(pair.key) ?? startOf(pair.value) ?? offset;
      node = pair.value;
    } else if (isSeq(node)) {
      const item = node.items[Number(segment)];
      if (item === undefined) {
        found = false;
        break;
      }
      offset = startOf(item) ?? offset;
      node = item;
    } else {
      found = false;
      break;
    }
  }
  return { line: offset === null ? 1 : lines.linePos(offset).line, node, found };
}

/** A path as problems name it, e.g. `servers.counter.kind`. */
export function pathText(segments: readonly PropertyKey[]): string {
  return segments.map(String).join(".");
}

/** The value at `segments` in plain data, and whether it is there at all. */
export function valueAt(
  data: unknown,
  segments: readonly PropertyKey[],
): { present: boolean; value: unknown } {
  let value: unknown = data;
  for (const segment of segments) {
    if (value === null || typeof value !== "object" || !Object.hasOwn(value, segment)) {
      return { present: false, value: undefined };
    }
    value = (value as Record<PropertyKey, unknown>)[segment];
  }
  return { present: true, value };
}
