/** Staged records, stage results, commit coordinates and manifest rows. */
import { describe, expect, it } from "vitest";
import {
  EMPTY_EXTRAS_DIGEST,
  chainHash,
  extrasDigest,
  hashTokenIds,
} from "#sdk/capture/digests.js";
import {
  CallRecordSchema,
  CommitCoordsSchema,
  StageResultSchema,
  StagedCallBaseSnapshotSchema,
  StagedCallRecordSchema,
  manifestRowSourceKey,
  stagedCallRecordFromComponents,
  stagingKey,
  type StagedCallComponents,
} from "#sdk/capture/records.js";
import { countDigests, expectReason, hex } from "./helpers.js";

function components(overrides: Partial<StagedCallComponents> = {}): StagedCallComponents {
  return {
    rollout_id: "r",
    model_call_id: "c2",
    parent_call_id: "c1",
    mode: "token_in",
    prev_len: 3,
    weight_version: 4,
    token_ids_delta: [7, 8, 9],
    token_mask_delta: [0, 1, 1],
    generation_log_probs_delta: [0, -0.5, -0.25],
    extras: { routed: [1, 2] },
    chain_hash: chainHash(hex("ab"), [7, 8, 9]),
    cumulative_hash: hashTokenIds([1, 2, 3, 7, 8, 9]),
    ...overrides,
  };
}

/** The wire form of a freshly built record (a plain, mutable copy). */
function wire(overrides: Partial<StagedCallComponents> = {}): Record<string, unknown> {
  return JSON.parse(JSON.stringify(stagedCallRecordFromComponents(components(overrides))));
}

function baseWire(): Record<string, unknown> {
  const { extras: _extras, ...base } = wire({ extras: null });
  return base;
}

describe("stagedCallRecordFromComponents", () => {
  it("derives the lengths and digests, and the record verifies", () => {
    const record = stagedCallRecordFromComponents(components());
    expect(record).toMatchObject({
      schema_version: 2,
      digest_version: 2,
      extras_digest_version: 1,
      delta_len: 3,
      cum_len: 6,
      extras_digest: extrasDigest({ routed: [1, 2] }),
    });
    expect(StagedCallRecordSchema.safeParse(JSON.parse(JSON.stringify(record))).success).toBe(true);
  });

  it("computes the staging digest and the extras digest once each", () => {
    const parts = components();
    const { counts } = countDigests(() => stagedCallRecordFromComponents(parts));
    expect(counts).toEqual({ cumulative: 0, chain: 0, extras: 1, staging: 1 });
  });

  it("freezes the record and copies its extras", () => {
    const extras = { routed: [1, 2] };
    const record = stagedCallRecordFromComponents(components({ extras }));
    extras.routed.push(3);
    expect(record.extras).toEqual({ routed: [1, 2] });
    expect(Object.isFrozen(record)).toBe(true);
    expect(Object.isFrozen(record.token_ids_delta)).toBe(true);
    expect(Object.isFrozen((record.extras as { routed: number[] }).routed)).toBe(true);
  });

  it("refuses components that break a record invariant", () => {
    expectReason(
      () => stagedCallRecordFromComponents(components({ token_mask_delta: [0, 1] })),
      "invalid_record",
    );
    expectReason(
      () => stagedCallRecordFromComponents(components({ extras: { x: NaN } })),
      "invalid_digest_input",
    );
  });
});

describe("StagedCallBaseSnapshotSchema", () => {
  it("accepts a staged call without extras, fills the defaults and freezes it", () => {
    const { schema_version: _s, extras_digest: _e, ...minimal } = baseWire();
    const parsed = StagedCallBaseSnapshotSchema.parse(minimal);
    expect(parsed.schema_version).toBe(2);
    expect(parsed.extras_digest).toBe(EMPTY_EXTRAS_DIGEST);
    expect(Object.isFrozen(parsed)).toBe(true);
  });

  it("refuses extras and unknown fields", () => {
    expect(StagedCallBaseSnapshotSchema.safeParse({ ...baseWire(), extras: null }).success).toBe(
      false,
    );
    expect(StagedCallBaseSnapshotSchema.safeParse({ ...baseWire(), note: 1 }).success).toBe(false);
  });

  it.each<[string, Record<string, unknown>, string]>([
    ["a parentless call with prev_len > 0", { parent_call_id: null }, "prev_len == 0"],
    ["a child with prev_len 0", { prev_len: 0 }, "prev_len > 0"],
    [
      "a parentless call in token_in mode",
      { parent_call_id: null, prev_len: 0 },
      "must use text mode",
    ],
    ["a child in text mode", { mode: "text" }, "must use token_in mode"],
    ["an empty delta", { delta_len: 0 }, "at least one token"],
    ["a negative token id", { token_ids_delta: [7, -8, 9] }, "non-negative"],
    ["a mask outside {0, 1}", { token_mask_delta: [0, 1, 0.5] }, "only 0.0 or 1.0"],
    [
      "a log probability on a masked-out token",
      { generation_log_probs_delta: [-1, -0.5, -0.25] },
      "must be 0.0",
    ],
    ["a digest of other contents", { token_ids_delta: [7, 8, 10] }, "digest does not match"],
    ["a digest of another weight version", { weight_version: 5 }, "digest does not match"],
    ["schema version 3", { schema_version: 3 }, ""],
    ["a float token id", { token_ids_delta: [7, 8.5, 9] }, ""],
    ["a string mask", { token_mask_delta: [0, "1", 1] }, ""],
    ["an uppercase digest", { digest: hex("AB") }, ""],
  ])("refuses %s", (_name, overrides, message) => {
    const result = StagedCallBaseSnapshotSchema.safeParse({ ...baseWire(), ...overrides });
    expect(result.success).toBe(false);
    expect(result.error?.issues.map((issue) => issue.message).join("; ")).toContain(message);
  });
});

describe("StagedCallRecordSchema", () => {
  it("accepts the wire form of a built record", () => {
    expect(StagedCallRecordSchema.parse(wire()).extras).toEqual({ routed: [1, 2] });
  });

  it("refuses extras that do not match extras_digest", () => {
    const result = StagedCallRecordSchema.safeParse({ ...wire(), extras: { routed: [1, 3] } });
    expect(result.error?.issues[0]?.message).toBe("extras_digest does not match extras");
  });

  it("refuses extras the digest cannot encode", () => {
    expect(StagedCallRecordSchema.safeParse({ ...wire(), extras: { x: NaN } }).success).toBe(false);
    expect(StagedCallRecordSchema.safeParse({ ...wire(), extras: [1] }).success).toBe(false);
  });

  it("copies the extras it keeps, so later changes to the input cannot drift", () => {
    const input = wire();
    const parsed = StagedCallRecordSchema.parse(input);
    (input.extras as { routed: number[] }).routed.push(3);
    expect(parsed.extras).toEqual({ routed: [1, 2] });
  });
});

describe("stagingKey", () => {
  it("joins the capture key and the model call ID", () => {
    expect(stagingKey("r-a1", "c3")).toBe("r-a1/c3");
  });

  it("refuses empty parts", () => {
    expectReason(() => stagingKey("", "c3"), "invalid_record");
    expectReason(() => stagingKey("r", ""), "invalid_record");
  });
});

describe("StageResultSchema", () => {
  it("accepts a success with a key and a failure with an error", () => {
    expect(StageResultSchema.parse({ ok: true, staging_key: "r/c1" })).toEqual({
      schema_version: 2,
      ok: true,
      staging_key: "r/c1",
      error: null,
    });
    expect(StageResultSchema.safeParse({ ok: false, error: "disk full" }).success).toBe(true);
  });

  it("refuses a success without a staging key", () => {
    expect(StageResultSchema.safeParse({ ok: true }).success).toBe(false);
  });

  it("refuses a failure without an error", () => {
    expect(StageResultSchema.safeParse({ ok: false }).success).toBe(false);
    expect(StageResultSchema.safeParse({ ok: false, error: "" }).success).toBe(false);
  });
});

const staged = {
  rollout_id: "r",
  model_call_id: "c2",
  parent_call_id: "c1",
  prev_len: 3,
  delta_len: 2,
  cum_len: 5,
  weight_version: 1,
  digest: hex("01"),
  extras_digest: EMPTY_EXTRAS_DIGEST,
  staging_key: "r/c2",
  chain_hash: hex("02"),
  cumulative_hash: hex("03"),
};
const failed = {
  rollout_id: "r",
  model_call_id: "c2",
  parent_call_id: "c1",
  prev_len: 3,
  delta_len: 0,
  cum_len: 3,
  weight_version: 1,
  disposition: "capture_failed",
};

describe("CommitCoordsSchema", () => {
  it("accepts staged coordinates (the default disposition) and failed ones", () => {
    expect(CommitCoordsSchema.parse(staged).disposition).toBe("staged");
    expect(CommitCoordsSchema.parse(failed).digest).toBeNull();
  });

  it.each<[string, Record<string, unknown>]>([
    ["a parentless call with prev_len > 0", { ...staged, parent_call_id: null }],
    ["a child with prev_len 0", { ...staged, prev_len: 0, cum_len: 2 }],
    ["cum_len unlike prev_len + delta_len", { ...staged, cum_len: 6 }],
    ["staged without a staging key", { ...staged, staging_key: null }],
    ["staged without a chain hash", { ...staged, chain_hash: null }],
    ["staged with an empty delta", { ...staged, delta_len: 0, cum_len: 3 }],
    ["capture_failed with a digest", { ...failed, digest: hex("01") }],
    ["capture_failed with a delta", { ...failed, delta_len: 1, cum_len: 4 }],
    ["an unknown field", { ...staged, extra: 1 }],
  ])("refuses %s", (_name, value) => {
    expect(CommitCoordsSchema.safeParse(value).success).toBe(false);
  });
});

const row = {
  model_call_id: "c2",
  parent_call_id: "c1",
  prev_len: 3,
  delta_len: 2,
  cum_len: 5,
  weight_version: 1,
  digest: hex("01"),
  extras_digest: EMPTY_EXTRAS_DIGEST,
  staging_key: "r/c2",
  chain_hash: hex("02"),
  cumulative_hash: hex("03"),
  response_id: "resp-1",
};

describe("CallRecordSchema", () => {
  it("accepts a manifest row and fills its defaults", () => {
    expect(CallRecordSchema.parse(row)).toMatchObject({
      mode: "token_in",
      admitted_at: null,
      fingerprint_version: 0,
      capture_key: null,
    });
  });

  it.each<[string, Record<string, unknown>]>([
    ["an empty delta", { delta_len: 0, cum_len: 3 }],
    ["cum_len unlike prev_len + delta_len", { cum_len: 4 }],
    ["a parentless row with prev_len > 0", { parent_call_id: null }],
    ["a child with prev_len 0", { prev_len: 0, cum_len: 2 }],
    ["a parentless row in token_in mode", { parent_call_id: null, prev_len: 0, cum_len: 2 }],
    ["a child in text mode", { mode: "text" }],
    ["no response_id", { response_id: undefined }],
    ["a non-digest output fingerprint", { output_fingerprint: "abc" }],
    ["an unknown field", { note: "x" }],
  ])("refuses %s", (_name, overrides) => {
    expect(CallRecordSchema.safeParse({ ...row, ...overrides }).success).toBe(false);
  });
});

describe("manifestRowSourceKey", () => {
  const receipt = "task-a2";

  it("is the receipt's rollout ID when the row has no capture key", () => {
    expect(manifestRowSourceKey({ model_call_id: "c1", capture_key: null }, receipt)).toBe(receipt);
  });

  it.each(["task", "task-a1", "task-a2"])(
    "accepts %s: same rollout, not a later attempt",
    (key) => {
      expect(manifestRowSourceKey({ model_call_id: "c1", capture_key: key }, receipt)).toBe(key);
    },
  );

  it.each(["task-a3", "other", "task-a1x-a1", "bad!key"])("refuses %s", (key) => {
    expectReason(
      () => manifestRowSourceKey({ model_call_id: "c1", capture_key: key }, receipt),
      "foreign_capture_key",
    );
  });
});
