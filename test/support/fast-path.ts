/**
 * Property-test kit for hand-checked fast paths: each must answer what its zod schema answers
 * (same data, same key order) or null wherever the schema refuses, and, with `takesEveryValid`,
 * never null where the schema accepts.
 */
import fc from "fast-check";
import { expect } from "vitest";

/** Values of the wrong type for any field. */
const OTHER_TYPES: unknown[] = [0, -1, 1.5, "", "x", null, [], {}, true];

/**
 * Mostly `good`; sometimes `bad` (a value of the right type the field refuses), a value of
 * another type, or undefined (the key left out once the value goes through JSON).
 */
export function mostly(
  good: fc.Arbitrary<unknown>,
  bad: fc.Arbitrary<unknown> = fc.constantFrom(...OTHER_TYPES),
  weight = 40,
): fc.Arbitrary<unknown> {
  return fc.oneof(
    { weight, arbitrary: good },
    { weight: 1, arbitrary: bad },
    { weight: 1, arbitrary: fc.constantFrom(...OTHER_TYPES) },
    { weight: 1, arbitrary: fc.constant(undefined) },
  );
}

/** `value` as it reads back from JSON: undefined members dropped, nothing but JSON left. */
export function throughJson(value: unknown): unknown {
  return JSON.parse(JSON.stringify(value) ?? "null");
}

/** JSON text of a value, bigints written as `<n>n`: equal texts mean the same keys in the same order. */
function orderedText(value: unknown): string {
  return JSON.stringify(value, (_key, v: unknown) => (typeof v === "bigint" ? `${v}n` : v));
}

/** What a schema's `safeParse` answers. */
type Outcome = { success: true; data: unknown } | { success: false };

/**
 * Asserts, for every value of `values`, that `fast` agrees with `slow` (the schema): null
 * where the schema refuses; where it accepts, the same data with the same JSON text (so the
 * same key order), or, unless `takesEveryValid`, null (the schema then decides). At least
 * `minTaken` values must go the fast way, so the property is not vacuous.
 */
export function expectAgreesWithSchema<T>(options: {
  readonly values: fc.Arbitrary<T>;
  readonly fast: (value: T) => unknown;
  readonly slow: (value: T) => Outcome;
  readonly takesEveryValid?: boolean;
  readonly minTaken?: number;
  readonly numRuns?: number;
}): void {
  let taken = 0;
  fc.assert(
    fc.property(options.values, (value) => {
      const fast = options.fast(value);
      const slow = options.slow(value);
      if (!slow.success) {
        expect(fast).toBeNull();
        return;
      }
      if (options.takesEveryValid === true) expect(fast).not.toBeNull();
      if (fast === null) return;
      taken += 1;
      expect(fast).toEqual(slow.data);
      expect(orderedText(fast)).toBe(orderedText(slow.data));
    }),
    { numRuns: options.numRuns ?? 1000 },
  );
  expect(taken).toBeGreaterThan(options.minTaken ?? 20);
}
