/**
 * Property tests of the checkpoint store (see docs/storage.md):
 * - every JSON payload either round-trips through a commit and a restore unchanged (same types,
 *   numbers equal by Object.is, same key order) or fails the commit with
 *   `invalid_checkpoint_state` naming its episode, leaving nothing behind;
 * - every corruption of a valid checkpoint is a `CheckpointStateError`, never another error.
 */
import { mkdir, readFile, writeFile } from "node:fs/promises";
import path from "node:path";
import fc from "fast-check";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { CheckpointStateError } from "#sdk/errors.js";
import { encodeJson, MAX_JSON_DEPTH, type JsonValue } from "#sdk/json/json-value.js";
import type { Manifest } from "#sdk/wire/storage.js";
import {
  INSTANCE,
  KIND,
  listDir,
  makeTempDir,
  pdirOf,
  read,
  rec,
  removeTempDir,
  TestRecordSchema,
  writer,
  type TestRecord,
} from "./helpers.js";

const MAX_SAFE = Number.MAX_SAFE_INTEGER;

let root: string;
let runs = 0;

beforeAll(async () => {
  root = await makeTempDir();
});

afterAll(async () => {
  await removeTempDir(root);
});

/** A fresh checkpoint directory for one property run. */
function freshDir(): string {
  runs += 1;
  return path.join(root, `run-${runs}`);
}

// ---------------------------------------------------------------------------------------------
// Arbitraries
// ---------------------------------------------------------------------------------------------

const numberArb: fc.Arbitrary<number> = fc.oneof(
  fc.double(), // NaN, ±Infinity, -0, subnormals, huge integer-valued doubles
  fc.integer(),
  fc.maxSafeInteger(),
  fc.constantFrom(NaN, Infinity, -Infinity, -0, 2 ** 53, -(2 ** 53), 1e21, 5e-324, MAX_SAFE),
);

/** Bigints beyond 2^53 (inside the safe range they read back as numbers, by design). */
const bigintArb: fc.Arbitrary<bigint> = fc.oneof(
  fc.bigInt({ min: BigInt(MAX_SAFE) + 1n, max: 2n ** 200n }),
  fc.bigInt({ min: -(2n ** 200n), max: -BigInt(MAX_SAFE) - 1n }),
);

const stringArb: fc.Arbitrary<string> = fc.oneof(
  fc.string({ maxLength: 12 }),
  fc.string({ unit: "grapheme", maxLength: 8 }),
  fc.string({ unit: "binary", maxLength: 8 }), // lone surrogates included
  fc.constantFrom("\n", "\r\n", "\u2028", "\u0000", '"\\', "NaN", "-Infinity", "😀", "é"),
);

const keyArb: fc.Arbitrary<string> = fc.oneof(
  stringArb,
  fc.nat({ max: 1_000_000 }).map(String), // integer-like keys: JS puts them first
  fc.constantFrom("__proto__", "constructor", "toJSON", "episode_id", "0", "01", "-1", "1.5"),
);

function plainObject(
  entries: [string, JsonValue][],
  nullProto: boolean,
): Record<string, JsonValue> {
  const obj: Record<string, JsonValue> = nullProto ? Object.create(null) : {};
  for (const [key, value] of entries) {
    Object.defineProperty(obj, key, {
      value,
      enumerable: true,
      writable: true,
      configurable: true,
    });
  }
  return obj;
}

const { value: extendedJsonArb } = fc.letrec<{
  value: JsonValue;
  array: JsonValue[];
  object: Record<string, JsonValue>;
}>((tie) => ({
  value: fc.oneof(
    { depthSize: "small", withCrossShrink: true },
    fc.oneof(fc.constant(null), fc.boolean(), numberArb, bigintArb, stringArb),
    tie("array"),
    tie("object"),
  ),
  array: fc.array(tie("value"), { maxLength: 5 }),
  object: fc
    .tuple(
      fc.uniqueArray(fc.tuple(keyArb, tie("value")), { selector: (e) => e[0], maxLength: 5 }),
      fc.boolean(),
    )
    .map(([entries, nullProto]) => plainObject(entries, nullProto)),
}));

/** `value` wrapped in `depth` arrays/objects (alternating by `objects`). */
function nest(value: JsonValue, depth: number, objects: boolean): JsonValue {
  let out = value;
  for (let i = 0; i < depth; i += 1) out = objects && i % 2 === 0 ? { k: out } : [out];
  return out;
}

/** A payload and whether a commit can write it (false: it must fail naming its episode). */
interface Payload {
  readonly value: unknown;
  readonly writable: boolean;
}

class Opaque {
  readonly x = 1;
}

/** Values accepted nowhere in a record (refused, or failing the commit by episode). */
const notJsonArb: fc.Arbitrary<unknown> = fc
  .constantFrom<() => unknown>(
    () => new Date(0),
    () => new Map([["a", 1]]),
    () => new Set([1]),
    () => undefined,
    () => new Opaque(),
    () => () => 1,
    () => Symbol("s"),
    () => new Uint8Array([1]),
    () => {
      const cycle: Record<string, unknown> = {};
      cycle.me = cycle;
      return cycle;
    },
  )
  .map((make) => make());

/** Puts `bad` somewhere inside `host` (as an array element or an object value). */
function inject(host: JsonValue, bad: unknown, where: number): unknown {
  if (Array.isArray(host) && host.length > 0) {
    const copy: unknown[] = [...host];
    copy[where % copy.length] = bad;
    return copy;
  }
  if (host !== null && typeof host === "object" && !Array.isArray(host)) {
    return { ...host, ["bad"]: bad };
  }
  return [host, bad];
}

/** Nesting of `depth` levels (alternating arrays and objects, or arrays only). */
const nestedArb = (min: number, max: number): fc.Arbitrary<JsonValue> =>
  fc
    .tuple(fc.integer({ min, max }), fc.boolean())
    .map(([depth, objects]) => nest(0, depth, objects));

/** Payloads a commit writes: the record adds one level, so at most 999 levels. */
const writablePayloadArb: fc.Arbitrary<Payload> = fc
  .oneof(
    { weight: 12, arbitrary: extendedJsonArb },
    { weight: 1, arbitrary: nestedArb(395, 405) },
    { weight: 1, arbitrary: nestedArb(990, MAX_JSON_DEPTH - 1) },
  )
  .map((value) => ({ value, writable: true }));

/** Payloads a commit must refuse by episode: a value that is not JSON, or nesting too deep. */
const unwritablePayloadArb: fc.Arbitrary<Payload> = fc
  .oneof(
    fc.tuple(extendedJsonArb, notJsonArb, fc.nat()).map(([host, bad, at]) => inject(host, bad, at)),
    nestedArb(MAX_JSON_DEPTH, MAX_JSON_DEPTH + 3),
  )
  .map((value) => ({ value, writable: false }));

/** A few writable payloads, and in about one run in four an unwritable one among them. */
const payloadsArb: fc.Arbitrary<Payload[]> = fc
  .tuple(
    fc.array(writablePayloadArb, { minLength: 1, maxLength: 6 }),
    fc.oneof(
      { weight: 3, arbitrary: fc.constant(null) },
      { weight: 1, arbitrary: fc.tuple(unwritablePayloadArb, fc.nat()) },
    ),
  )
  .map(([payloads, bad]) => {
    if (bad === null) return payloads;
    const out = [...payloads];
    out.splice(bad[1] % (out.length + 1), 0, bad[0]);
    return out;
  });

const ok = (value: unknown): Payload => ({ value, writable: true });

/** Edge cases every run of the law checks first. */
const EXAMPLES: [Payload[]][] = [
  [[ok([-0, NaN, Infinity, -Infinity, 0, 2 ** 53, -(2 ** 60), 1e300, 5e-324])]],
  [[ok({ big: 2n ** 64n, neg: -(2n ** 80n), edge: 2n ** 53n })]],
  [[ok({ b: 1, "2": 2, a: 3, "1": 4, "01": 5, __proto__x: 6 }), ok(JSON.parse('{"__proto__":1}'))]],
  [[ok({ s: "é😀\u2028\n\u0000\ud800", "😀": ["\udfff"] })]],
  [[ok(nest(0, MAX_JSON_DEPTH - 1, true)), ok(nest(0, 400, false))]],
  [[ok(1), { value: nest(0, MAX_JSON_DEPTH, false), writable: false }]],
  [[ok(null), { value: { d: new Date(0) }, writable: false }, ok(2)]],
];

/** Deep equality for the JSON model: Object.is numbers, exact bigints, same key order. */
function sameJson(a: unknown, b: unknown): boolean {
  if (typeof a === "number" || typeof b === "number") return Object.is(a, b);
  if (typeof a !== "object" || a === null || typeof b !== "object" || b === null) return a === b;
  if (Array.isArray(a) !== Array.isArray(b)) return false;
  const ka = Object.keys(a);
  const kb = Object.keys(b);
  if (ka.length !== kb.length || ka.some((k, i) => k !== kb[i])) return false;
  return ka.every((k) =>
    sameJson((a as Record<string, unknown>)[k], (b as Record<string, unknown>)[k]),
  );
}

// ---------------------------------------------------------------------------------------------
// Round trip
// ---------------------------------------------------------------------------------------------

describe("payload law", () => {
  it("every payload is restored unchanged, or fails its commit with invalid_checkpoint_state naming its episode", async () => {
    await fc.assert(
      fc.asyncProperty(payloadsArb, async (payloads) => {
        const dir = freshDir();
        const records: TestRecord[] = payloads.map((p, i) => rec(`ep-${i}-a${i + 1}`, p.value));
        const firstBad = payloads.findIndex((p) => !p.writable);
        // Premise of the law: what the commit writes is what JsonPayloadSchema accepts.
        payloads.forEach((p, i) => {
          if (p.writable) expect(TestRecordSchema.safeParse(records[i]).success).toBe(true);
        });
        let manifest: Manifest | null = null;
        let failure: unknown = null;
        try {
          manifest = await writer(dir).write(records);
        } catch (error) {
          failure = error;
        }
        if (firstBad >= 0) {
          expect(failure).toBeInstanceOf(CheckpointStateError);
          const error = failure as CheckpointStateError;
          const key = `ep-${firstBad}-a${firstBad + 1}`;
          expect(error.code).toBe("invalid_checkpoint_state");
          expect(error.captureKey).toBe(key);
          expect(error.detail).toContain(`episode '${key}'`);
          expect(await listDir(pdirOf(dir))).toEqual([]);
          return;
        }
        expect(failure).toBeNull();
        expect(manifest?.record_count).toBe(records.length);
        const back = await read(dir);
        expect(back.records).toHaveLength(records.length);
        back.records.forEach((record, i) => {
          const payload = (record as TestRecord).state;
          if (!sameJson(payload, payloads[i]?.value)) {
            expect.fail(`payload ${i} changed: ${encodeJson(payload)}`);
          }
        });
      }),
      { numRuns: 60, examples: EXAMPLES },
    );
  });
});

// ---------------------------------------------------------------------------------------------
// Corruption
// ---------------------------------------------------------------------------------------------

const GOLDEN: TestRecord[] = [
  rec("r", { turn: 1, text: "héllo\n", nan: NaN }),
  rec("s-a1", [1, -0, 2n ** 64n, { "2": "b", "1": "a" }]),
  rec("t", null),
  rec("u-a4", "x".repeat(200)),
];
const GOLDEN_KEYS = ["r", "s-a1", "t", "u-a4"];

let goldenRecords: Buffer;
let goldenManifest: Record<string, unknown>;
let goldenManifestText: string;

beforeAll(async () => {
  const dir = path.join(root, "golden");
  const manifest = await writer(dir).write(GOLDEN);
  goldenRecords = await readFile(path.join(pdirOf(dir), manifest.records_file));
  goldenManifestText = await readFile(path.join(pdirOf(dir), "manifest.json"), "utf8");
  goldenManifest = JSON.parse(goldenManifestText) as Record<string, unknown>;
});

/** Splits the records file into its lines (each with its newline). */
function splitLines(bytes: Buffer): Buffer[] {
  const out: Buffer[] = [];
  let start = 0;
  for (let nl = bytes.indexOf(10); nl >= 0; nl = bytes.indexOf(10, start)) {
    out.push(bytes.subarray(start, nl + 1));
    start = nl + 1;
  }
  return out;
}

/** A corruption of a file's bytes, as data (readable counterexamples). */
type ByteCorruption =
  | { op: "flip"; at: number; mask: number }
  | { op: "truncate"; at: number }
  | { op: "append"; extra: Uint8Array }
  | { op: "dropLine" | "duplicateLine"; at: number }
  | { op: "reverseLines" };

function applyCorruption(bytes: Buffer, c: ByteCorruption): Buffer {
  switch (c.op) {
    case "flip": {
      const copy = Buffer.from(bytes);
      const i = c.at % copy.length;
      copy[i] = (copy[i] as number) ^ c.mask;
      return copy;
    }
    case "truncate":
      return bytes.subarray(0, c.at % bytes.length);
    case "append":
      return Buffer.concat([bytes, c.extra]);
    case "dropLine":
    case "duplicateLine": {
      const parts = splitLines(bytes);
      const i = c.at % parts.length;
      if (c.op === "dropLine") parts.splice(i, 1);
      else parts.splice(i, 0, parts[i] as Buffer);
      return Buffer.concat(parts);
    }
    case "reverseLines":
      return Buffer.concat(splitLines(bytes).reverse());
  }
}

const flipArb = fc.record({
  op: fc.constant("flip" as const),
  at: fc.nat(),
  mask: fc.integer({ min: 1, max: 255 }),
});
const truncateArb = fc.record({ op: fc.constant("truncate" as const), at: fc.nat() });
const appendArb = fc.record({
  op: fc.constant("append" as const),
  extra: fc.oneof(
    fc.uint8Array({ minLength: 1, maxLength: 40 }),
    fc
      .constantFrom('{"episode_id":{"rollout_id":"v","attempt":0},"state":1}\n', "\n", "NaN\n", " ")
      .map((text) => new Uint8Array(Buffer.from(text))),
  ),
});

/** A corruption of the records file: always detected. */
const recordsCorruptionArb: fc.Arbitrary<ByteCorruption> = fc.oneof(
  flipArb,
  truncateArb,
  appendArb,
  fc.record({ op: fc.constantFrom("dropLine" as const, "duplicateLine" as const), at: fc.nat() }),
  fc.constant({ op: "reverseLines" as const }),
);

/** A raw corruption of the manifest text: detected, or harmless (e.g. whitespace). */
const manifestBytesCorruptionArb: fc.Arbitrary<ByteCorruption> = fc.oneof(
  flipArb,
  truncateArb,
  appendArb,
);

const REQUIRED = [
  "schema_version",
  "kind",
  "instance",
  "checkpoint_id",
  "records_file",
  "records_sha256",
  "record_count",
] as const;

/** Values of the right type, more likely to slip through than arbitrary JSON. */
const plausibleArb: Record<(typeof REQUIRED)[number], fc.Arbitrary<unknown>> = {
  schema_version: fc.integer({ min: -1, max: 3 }),
  kind: fc.constantFrom("agent", "model", "Environment", "", { toString: 1 }, ["a", "b"]),
  instance: fc.constantFrom("env-2", "env", "env-1 ", ""),
  checkpoint_id: fc.constantFrom(null, 1, ["ckpt-1"], { id: "ckpt-1" }),
  records_file: fc.constantFrom(
    "records.jsonl", // the legacy name, but no such file
    `records-${"0".repeat(64)}.jsonl`,
    "../records.jsonl",
    "manifest.json",
    "",
  ),
  records_sha256: fc.stringMatching(/^[0-9a-f]{64}$/), // any other digest
  record_count: fc.integer({ min: 0, max: 8 }),
};

/** One required manifest field deleted or set to another value: always detected. */
interface FieldMutation {
  readonly field: (typeof REQUIRED)[number];
  readonly value: unknown; // undefined: deleted
}

const fieldMutationArb: fc.Arbitrary<FieldMutation> = fc
  .constantFrom(...REQUIRED)
  .chain((field) =>
    fc.record({
      field: fc.constant(field),
      value: fc.option(fc.oneof(plausibleArb[field], fc.jsonValue({ maxDepth: 2 })), {
        nil: undefined,
      }),
    }),
  )
  .filter(({ field, value }) => {
    if (value === undefined) return true;
    // checkpoint_id may be any string: only a non-string breaks it.
    if (field === "checkpoint_id") return typeof value !== "string";
    return JSON.stringify(value) !== JSON.stringify(goldenManifest[field]);
  });

function applyMutation(m: Record<string, unknown>, { field, value }: FieldMutation) {
  const copy = { ...m };
  if (value === undefined) delete copy[field];
  else copy[field] = value;
  return copy;
}

const scopeArb: fc.Arbitrary<string[] | null> = fc.option(fc.subarray([...GOLDEN_KEYS, "absent"]), {
  nil: null,
});

async function plantGolden(
  dir: string,
  records: Buffer,
  manifestText: string | Buffer,
): Promise<void> {
  const pdir = pdirOf(dir);
  await mkdir(pdir, { recursive: true });
  await writeFile(path.join(pdir, goldenManifest.records_file as string), records);
  await writeFile(path.join(pdir, "manifest.json"), manifestText);
}

/** Reads and returns the error, which must be a typed 422 (or null when the read succeeded). */
async function readError(
  dir: string,
  scope: string[] | null,
): Promise<CheckpointStateError | null> {
  try {
    await read(dir, scope);
    return null;
  } catch (error) {
    if (!(error instanceof CheckpointStateError)) {
      expect.fail(`not a CheckpointStateError: ${String(error)}`);
    }
    expect(error.code).toBe("invalid_checkpoint_state");
    expect(error.status).toBe(422);
    return error;
  }
}

describe("corruption", () => {
  it("the untouched golden checkpoint reads back", async () => {
    const dir = freshDir();
    await plantGolden(dir, goldenRecords, goldenManifestText);
    expect((await read(dir)).records).toEqual(GOLDEN);
    expect(goldenManifest).toMatchObject({ kind: KIND, instance: INSTANCE });
  });

  it("every corruption of the records file is a CheckpointStateError", async () => {
    const dir = freshDir(); // each run overwrites both files
    await fc.assert(
      fc.asyncProperty(recordsCorruptionArb, scopeArb, async (corruption, scope) => {
        const bytes = applyCorruption(goldenRecords, corruption);
        fc.pre(!bytes.equals(goldenRecords));
        await plantGolden(dir, bytes, goldenManifestText);
        expect(await readError(dir, scope)).not.toBeNull();
      }),
      { numRuns: 100 },
    );
  });

  it("every mutation of a required manifest field is a CheckpointStateError", async () => {
    const dir = freshDir(); // each run overwrites both files
    await fc.assert(
      fc.asyncProperty(fieldMutationArb, scopeArb, async (mutation, scope) => {
        const manifest = applyMutation(goldenManifest, mutation);
        await plantGolden(dir, goldenRecords, JSON.stringify(manifest, null, 1));
        expect(await readError(dir, scope)).not.toBeNull();
      }),
      { numRuns: 100 },
    );
  });

  it("every raw corruption of the manifest is a CheckpointStateError or harmless", async () => {
    const dir = freshDir(); // each run overwrites both files
    await fc.assert(
      fc.asyncProperty(manifestBytesCorruptionArb, scopeArb, async (corruption, scope) => {
        const text = applyCorruption(Buffer.from(goldenManifestText), corruption);
        await plantGolden(dir, goldenRecords, text);
        const error = await readError(dir, scope);
        if (error === null) {
          const back = await read(dir, scope);
          const keep =
            scope === null
              ? GOLDEN
              : GOLDEN.filter((_, i) => scope.includes(GOLDEN_KEYS[i] as string));
          expect(back.records).toEqual(keep);
        }
      }),
      { numRuns: 100 },
    );
  });
});
