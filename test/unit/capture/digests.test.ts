/**
 * Staging digests. Known answers are computed here from the byte layout with an
 * independent Buffer-based builder, so a wrong field order, width or endianness fails.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  EMPTY_EXTRAS_DIGEST,
  buildStagingDelta,
  chainHash,
  extrasDigest,
  hashTokenIds,
  stagingDigest,
  type StagingDigestInput,
} from "#sdk/capture/digests.js";
import { pyFloat } from "#sdk/capture/python-json.js";
import { Bytes, countDigests, expectReason, float32Bytes, hex, tokenIdBytes } from "./helpers.js";

const tokenIds = fc.array(fc.integer({ min: 0, max: 2 ** 32 }), { maxLength: 20 });

describe("hashTokenIds", () => {
  it("hashes the domain, the count and each id as u64 big-endian", () => {
    const expected = new Bytes()
      .ascii("nemo-gym-staging-prefix-v2")
      .raw(tokenIdBytes([1, 2, 300]).buffer())
      .sha256();
    expect(hashTokenIds([1, 2, 300])).toBe(expected);
  });

  it("encodes ids up to 2^53 - 1 exactly", () => {
    const big = Number.MAX_SAFE_INTEGER;
    const expected = new Bytes()
      .ascii("nemo-gym-staging-prefix-v2")
      .u64(1)
      .raw(Buffer.from("001fffffffffffff", "hex"))
      .sha256();
    expect(hashTokenIds([big])).toBe(expected);
  });

  it("hashes long sequences, and many parts, through the writer's streaming path alike", () => {
    // 8 bytes per id: these cross the writer's 64 KiB buffer in one part and in many.
    for (const length of [4_095, 4_096, 8_191, 100_000]) {
      const ids = Array.from({ length }, (_, i) => (i * 7919) % 2 ** 32);
      const expected = new Bytes()
        .ascii("nemo-gym-staging-prefix-v2")
        .raw(tokenIdBytes(ids).buffer())
        .sha256();
      expect(hashTokenIds(ids)).toBe(expected);
      const parts = Array.from({ length: 97 }, (_, k) =>
        ids.slice((k * length) / 97, ((k + 1) * length) / 97),
      );
      expect(hashTokenIds(...parts)).toBe(expected);
    }
  });

  it("hashes several parts as their concatenation", () => {
    fc.assert(
      fc.property(tokenIds, tokenIds, (a, b) => {
        expect(hashTokenIds(a, b)).toBe(hashTokenIds([...a, ...b]));
      }),
    );
  });

  it("is deterministic and tells different sequences apart", () => {
    fc.assert(
      fc.property(tokenIds, tokenIds, (a, b) => {
        expect(hashTokenIds(a)).toBe(hashTokenIds([...a]));
        expect(hashTokenIds(a) === hashTokenIds(b)).toBe(a.join() === b.join());
      }),
    );
  });

  it.each([
    ["a negative id", [-1]],
    ["a fractional id", [1.5]],
    ["an id beyond 2^53", [2 ** 53]],
    ["a string id", ["1" as unknown as number]],
  ])("refuses %s", (_name, ids) => {
    expectReason(() => hashTokenIds(ids), "invalid_digest_input");
  });
});

describe("chainHash", () => {
  it("marks a root with 0x00", () => {
    const expected = new Bytes()
      .ascii("nemo-gym-staging-chain-v1")
      .u8(0)
      .raw(tokenIdBytes([5]).buffer())
      .sha256();
    expect(chainHash(null, [5])).toBe(expected);
  });

  it("chains a child on the parent's 32 raw bytes after 0x01", () => {
    const parent = hex("0f");
    const expected = new Bytes()
      .ascii("nemo-gym-staging-chain-v1")
      .u8(1)
      .hex(parent)
      .raw(tokenIdBytes([7, 8]).buffer())
      .sha256();
    expect(chainHash(parent, [7, 8])).toBe(expected);
  });

  it("composes along a lineage, and the split between calls matters", () => {
    fc.assert(
      fc.property(tokenIds, tokenIds, tokenIds, (a, b, c) => {
        const two = chainHash(chainHash(null, a), b);
        expect(chainHash(two, c)).toBe(chainHash(chainHash(chainHash(null, a), b), c));
        fc.pre(b.length > 0);
        expect(two).not.toBe(chainHash(null, [...a, ...b]));
      }),
    );
  });

  it.each([
    ["uppercase", hex("AB")],
    ["short", "ab"],
    ["not hex", hex("zz")],
  ])("refuses a parent that is not a lowercase digest (%s)", (_name, parent) => {
    expectReason(() => chainHash(parent, [1]), "invalid_digest_input");
  });
});

describe("extrasDigest", () => {
  const extras = (...body: ((b: Bytes) => Bytes)[]) =>
    body.reduce((b, f) => f(b), new Bytes().ascii("nemo-gym-staging-extras-v1").u8(1)).sha256();

  it("digests null as N", () => {
    expect(EMPTY_EXTRAS_DIGEST).toBe(extras((b) => b.ascii("N")));
    expect(extrasDigest(null)).toBe(EMPTY_EXTRAS_DIGEST);
  });

  it("encodes every type with its tag, keys in UTF-8 byte order", () => {
    const value = {
      s: "hé",
      b: [true, false, null],
      "\u{10000}": 2n ** 63n - 1n,
      "\uffff": -(2n ** 63n),
      a: 1,
      f: 0.5,
      i: pyFloat(1),
    };
    const expected = extras(
      (b) => b.ascii("D").u64(7),
      (b) => b.text("a").ascii("I").i64(1n),
      (b) => b.text("b").ascii("L").u64(3).ascii("B").u8(1).ascii("B").u8(0).ascii("N"),
      (b) => b.text("f").ascii("F").f64(0.5),
      (b) => b.text("i").ascii("F").f64(1),
      (b) => b.text("s").ascii("S").text("hé"),
      (b) =>
        b
          .text("\uffff")
          .ascii("I")
          .i64(-(2n ** 63n)),
      (b) =>
        b
          .text("\u{10000}")
          .ascii("I")
          .i64(2n ** 63n - 1n),
    );
    expect(extrasDigest(value)).toBe(expected);
  });

  it("writes -0 as a float, since no Python int is negative zero", () => {
    expect(extrasDigest({ z: -0 })).toBe(
      extras((b) => b.ascii("D").u64(1).text("z").ascii("F").f64(-0)),
    );
  });

  it("matches the Python reference's published conformance vector", () => {
    // nemo_gym/token_id_capture/staging/conformance/golden_vectors.json
    expect(extrasDigest({ routed_experts: [[[1, 2]], [[3, 4]]] })).toBe(
      "032024e899456be6e9a78c6d0399c5112d2ca7fa18d4ea9cf0d8cb7d0094f3a3",
    );
  });

  it.each([
    ["NaN", { x: NaN }],
    ["Infinity", { x: Infinity }],
    ["an integer beyond int64", { x: 2n ** 63n }],
    ["undefined", { x: undefined }],
    ["a Date", { x: new Date(0) }],
    ["a lone surrogate in a key", { "\ud800": 1 }],
    ["a lone surrogate in a value", { x: "\udc00" }],
  ])("refuses %s", (_name, value) => {
    expectReason(() => extrasDigest(value), "invalid_digest_input");
  });

  it("refuses extras that are not an object or null", () => {
    expectReason(() => extrasDigest([] as never), "invalid_digest_input");
    expectReason(() => extrasDigest("x" as never), "invalid_digest_input");
  });
});

function input(overrides: Partial<StagingDigestInput> = {}): StagingDigestInput {
  return {
    schema_version: 2,
    digest_version: 2,
    extras_digest_version: 1,
    rollout_id: "r-a1",
    model_call_id: "c2",
    parent_call_id: "c1",
    mode: "token_in",
    prev_len: 3,
    delta_len: 2,
    cum_len: 5,
    weight_version: 7,
    token_ids_delta: [10, 11],
    token_mask_delta: [0, 1],
    generation_log_probs_delta: [0, -0.1],
    extras_digest: EMPTY_EXTRAS_DIGEST,
    chain_hash: hex("11"),
    cumulative_hash: hex("22"),
    ...overrides,
  };
}

/** The v2 staging layout of a child call's fields, built independently with Buffers. */
function childLayoutDigest(r: StagingDigestInput): string {
  return new Bytes()
    .ascii("nemo-gym-staging-call-v2")
    .u8(2)
    .u8(2)
    .u8(1)
    .text(r.rollout_id)
    .text(r.model_call_id)
    .u8(1)
    .text(r.parent_call_id as string)
    .text(r.mode)
    .u64(r.prev_len)
    .u64(r.delta_len)
    .u64(r.cum_len)
    .u64(r.weight_version)
    .nested(tokenIdBytes([...r.token_ids_delta]))
    .nested(float32Bytes([...r.token_mask_delta]))
    .nested(float32Bytes([...r.generation_log_probs_delta]))
    .hex(r.extras_digest)
    .u8(1)
    .hex(r.chain_hash)
    .u8(1)
    .hex(r.cumulative_hash)
    .sha256();
}

describe("stagingDigest", () => {
  it("hashes the v2 layout of a child call", () => {
    expect(stagingDigest(input())).toBe(childLayoutDigest(input()));
  });

  it("matches the byte layout for any IDs (ASCII or not) and any column length", () => {
    // The writer takes shortcuts for ASCII text and short columns; the layout must not notice.
    const id = fc.oneof(
      fc.stringMatching(/^[A-Za-z0-9][A-Za-z0-9._-]{0,30}$/),
      fc.string({ unit: "grapheme", minLength: 1, maxLength: 12 }),
    );
    const column = fc.integer({ min: 1, max: 9_000 });
    fc.assert(
      fc.property(id, id, id, column, fc.boolean(), (rollout, call, parent, n, long) => {
        const length = long ? n : 1 + (n % 40);
        const ids = Array.from({ length }, (_, i) => (i * 104_729) % 2 ** 33);
        const masks = ids.map((_, i) => (i % 3 === 0 ? 0 : 1));
        const logprobs = masks.map((mask, i) => (mask === 0 ? 0 : -i / 7));
        const record = input({
          rollout_id: rollout,
          model_call_id: call,
          parent_call_id: parent,
          prev_len: 4,
          delta_len: length,
          cum_len: 4 + length,
          token_ids_delta: ids,
          token_mask_delta: masks,
          generation_log_probs_delta: logprobs,
        });
        expect(stagingDigest(record)).toBe(childLayoutDigest(record));
        const chained = new Bytes()
          .ascii("nemo-gym-staging-chain-v1")
          .u8(1)
          .hex(hex("33"))
          .raw(tokenIdBytes(ids).buffer())
          .sha256();
        expect(chainHash(hex("33"), ids)).toBe(chained);
      }),
      { numRuns: 150 },
    );
  });

  it("writes 0x00 for the parent of a root", () => {
    const root = input({
      rollout_id: "r",
      model_call_id: "c1",
      parent_call_id: null,
      mode: "text",
      prev_len: 0,
      delta_len: 1,
      cum_len: 1,
      weight_version: Number.MAX_SAFE_INTEGER,
      token_ids_delta: [4],
      token_mask_delta: [1],
      generation_log_probs_delta: [-1.5],
    });
    const expected = new Bytes()
      .ascii("nemo-gym-staging-call-v2")
      .u8(2)
      .u8(2)
      .u8(1)
      .text("r")
      .text("c1")
      .u8(0)
      .text("text")
      .u64(0)
      .u64(1)
      .u64(1)
      .u64(Number.MAX_SAFE_INTEGER)
      .nested(tokenIdBytes([4]))
      .nested(float32Bytes([1]))
      .nested(float32Bytes([-1.5]))
      .hex(EMPTY_EXTRAS_DIGEST)
      .u8(1)
      .hex(hex("11"))
      .u8(1)
      .hex(hex("22"))
      .sha256();
    expect(stagingDigest(root)).toBe(expected);
  });

  it("tells the observers it hashed once", () => {
    const { counts } = countDigests(() => stagingDigest(input()));
    expect(counts).toEqual({ cumulative: 0, chain: 0, extras: 0, staging: 1 });
  });

  it.each<[string, Partial<StagingDigestInput>]>([
    ["schema version 3", { schema_version: 3 }],
    ["digest version 1", { digest_version: 1 }],
    ["extras digest version 2", { extras_digest_version: 2 }],
    ["an empty rollout_id", { rollout_id: "" }],
    ["an empty model_call_id", { model_call_id: "" }],
    ["an empty parent_call_id", { parent_call_id: "" }],
    ["an unknown mode", { mode: "tokens" }],
    ["a parentless token_in call", { parent_call_id: null }],
    ["a parentless call with prev_len > 0", { parent_call_id: null, mode: "text" }],
    ["a child in text mode", { mode: "text" }],
    ["a child with prev_len 0", { prev_len: 0, cum_len: 2 }],
    ["an empty delta", { delta_len: 0, cum_len: 3 }],
    ["delta_len unlike the token count", { delta_len: 3, cum_len: 6 }],
    ["columns of unequal length", { generation_log_probs_delta: [0] }],
    ["a mask of 0.5", { token_mask_delta: [0, 0.5] }],
    ["a masked-out log probability", { generation_log_probs_delta: [-0.5, -0.1] }],
    ["cum_len unlike prev_len + delta_len", { cum_len: 6 }],
  ])("refuses %s as an invalid record", (_name, overrides) => {
    expectReason(() => stagingDigest(input(overrides)), "invalid_record");
  });

  it.each<[string, Partial<StagingDigestInput>]>([
    ["a bad extras digest", { extras_digest: "00" }],
    ["a bad chain hash", { chain_hash: hex("AB") }],
    ["a bad cumulative hash", { cumulative_hash: "x" }],
    ["a negative token id", { token_ids_delta: [10, -1] }],
    ["a fractional weight version", { weight_version: 1.5 }],
    ["a log probability beyond float32", { generation_log_probs_delta: [0, -1e39] }],
    ["a NaN log probability", { generation_log_probs_delta: [0, NaN] }],
    ["a lone surrogate in the rollout ID", { rollout_id: "r\ud800" }],
  ])("refuses %s as an encoding error", (_name, overrides) => {
    expectReason(() => stagingDigest(input(overrides)), "invalid_digest_input");
  });

  it("rounds log probabilities to float32 as Python's struct.pack does", () => {
    // 1e-46 underflows to 0 and 3.4028235677973366e38 rounds to FLT_MAX: both finite.
    const tiny = input({ generation_log_probs_delta: [0, -1e-46] });
    const rounded = input({ generation_log_probs_delta: [0, -0] });
    expect(stagingDigest(tiny)).toBe(stagingDigest(rounded));
    expect(() =>
      stagingDigest(input({ generation_log_probs_delta: [0, -3.4028235e38] })),
    ).not.toThrow();
  });
});

describe("buildStagingDelta", () => {
  it("carries the prompt past prev_len masked 0, then the generation masked 1", () => {
    expect(
      buildStagingDelta({
        promptTokenIds: [1, 2, 3, 4],
        generatedTokenIds: [5, 6],
        generatedLogprobs: [-0.5, -0.25],
        prevLen: 2,
      }),
    ).toEqual({
      token_ids_delta: [3, 4, 5, 6],
      token_mask_delta: [0, 0, 1, 1],
      generation_log_probs_delta: [0, 0, -0.5, -0.25],
    });
  });

  it.each([
    ["prev_len beyond the prompt", { prevLen: 5 }],
    ["a negative prev_len", { prevLen: -1 }],
    ["unequal generated columns", { generatedLogprobs: [] }],
    ["an empty delta", { promptTokenIds: [1, 2], generatedTokenIds: [], generatedLogprobs: [] }],
  ])("refuses %s", (_name, overrides) => {
    expectReason(
      () =>
        buildStagingDelta({
          promptTokenIds: [1, 2],
          generatedTokenIds: [3],
          generatedLogprobs: [-1],
          prevLen: 2,
          ...overrides,
        }),
      "invalid_record",
    );
  });
});
