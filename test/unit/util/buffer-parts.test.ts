/**
 * Bytes held as several buffers: heads, tails and lines read without joining the parts, and
 * exactly the bytes a joined buffer would give, wherever the parts are cut.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { dropHead, headOf, linesOf, partsLength } from "#sdk/util/buffer-parts.js";

/** `bytes` cut at `cuts` (positions, any order, repeats allowed). */
function cut(bytes: Buffer, cuts: readonly number[]): Buffer[] {
  const at = [...new Set(cuts.map((c) => c % (bytes.length + 1)))].sort((a, b) => a - b);
  const parts: Buffer[] = [];
  let start = 0;
  for (const end of [...at, bytes.length]) {
    parts.push(bytes.subarray(start, end));
    start = end;
  }
  return parts;
}

describe("buffer parts", () => {
  it("read as the joined bytes would, wherever the parts are cut", () => {
    fc.assert(
      fc.property(
        fc
          .uint8Array({ maxLength: 200 })
          .map((a) => Buffer.from(a.map((b) => (b % 5 === 0 ? 10 : b)))),
        fc.array(fc.nat(), { maxLength: 8 }),
        fc.nat(),
        (bytes, cuts, n) => {
          const parts = cut(bytes, cuts);
          expect(partsLength(parts)).toBe(bytes.length);
          const head = n % (bytes.length + 1);
          expect(headOf(parts, head).equals(bytes.subarray(0, head))).toBe(true);
          expect(Buffer.concat(dropHead(parts, head)).equals(bytes.subarray(head))).toBe(true);
          const { lines, trailing } = linesOf(parts);
          const last = bytes.lastIndexOf(10);
          expect(Buffer.concat(lines).equals(bytes.subarray(0, last + 1))).toBe(true);
          expect(
            lines.every((line) => line.at(-1) === 10 && line.indexOf(10) === line.length - 1),
          ).toBe(true);
          expect(trailing).toBe(bytes.length - last - 1);
        },
      ),
      { seed: 7, numRuns: 300 },
    );
  });

  it("hand out views of the parts, copying only a line that spans two", () => {
    // Each in memory of its own (small `Buffer.from`s share one pool).
    const own = (text: string): Buffer => {
      const buffer = Buffer.allocUnsafeSlow(text.length);
      buffer.write(text);
      return buffer;
    };
    const first = own("a\nbb\ncc");
    const second = own("c\nd\n");
    const { lines } = linesOf([first, second]);
    expect(lines.map(String)).toEqual(["a\n", "bb\n", "ccc\n", "d\n"]);
    expect(lines[0]!.buffer).toBe(first.buffer);
    expect(lines[1]!.byteOffset).toBe(first.byteOffset + 2);
    expect(lines[2]!.buffer).not.toBe(first.buffer);
    expect(lines[2]!.buffer).not.toBe(second.buffer);
    expect(lines[3]!.buffer).toBe(second.buffer);
    expect(headOf([first, second], 3).buffer).toBe(first.buffer);
  });
});
