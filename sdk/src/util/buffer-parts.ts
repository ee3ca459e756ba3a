/**
 * Bytes held as a list of buffers (the chunks a socket delivered, or the chunks an encoder
 * filled), read without joining them: joining a large message copies it into fresh memory,
 * and touching fresh pages costs more than the copy itself.
 */

/** The total length of `parts`. */
export function partsLength(parts: readonly Buffer[]): number {
  let total = 0;
  for (const part of parts) total += part.length;
  return total;
}

/**
 * The first `length` bytes of `parts` (there are at least that many) as one buffer: a view when
 * the first part holds them all, a copy otherwise.
 */
export function headOf(parts: readonly Buffer[], length: number): Buffer {
  const first = parts[0];
  if (first !== undefined && first.length >= length) return first.subarray(0, length);
  const head = Buffer.allocUnsafe(length);
  let filled = 0;
  for (const part of parts) {
    if (filled === length) break;
    filled += part.copy(head, filled, 0, Math.min(part.length, length - filled));
  }
  return head;
}

/** `parts` without their first `length` bytes (views; no byte is copied). */
export function dropHead(parts: readonly Buffer[], length: number): Buffer[] {
  const rest: Buffer[] = [];
  let skip = length;
  for (const part of parts) {
    if (skip >= part.length) {
      skip -= part.length;
      continue;
    }
    rest.push(skip === 0 ? part : part.subarray(skip));
    skip = 0;
  }
  return rest;
}

/**
 * Splits `parts` into `count`'s worth of lines, each with its newline: a view of its part, or a
 * copy for a line that spans parts. `trailing` counts the bytes after the last newline.
 */
export function linesOf(parts: readonly Buffer[]): { lines: Buffer[]; trailing: number } {
  const lines: Buffer[] = [];
  /** The start of a line begun in earlier parts, not finished yet. */
  let pending: Buffer[] = [];
  for (const part of parts) {
    let start = 0;
    for (let end = part.indexOf(0x0a, start); end >= 0; end = part.indexOf(0x0a, start)) {
      const piece = part.subarray(start, end + 1);
      if (pending.length === 0) {
        lines.push(piece);
      } else {
        pending.push(piece);
        lines.push(Buffer.concat(pending));
        pending = [];
      }
      start = end + 1;
    }
    if (start < part.length) pending.push(part.subarray(start));
  }
  return { lines, trailing: partsLength(pending) };
}
