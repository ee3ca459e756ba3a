/**
 * RolloutTokenCapture: beginCall's checks in order, the record builders, and
 * completion. Generation-cut scenarios stage a prefix from a live call, then continue it in a
 * replacement attempt.
 */
import fc from "fast-check";
import { pino } from "pino";
import { beforeEach, describe, expect, it } from "vitest";
import {
  CaptureAdmissionSchema,
  type CaptureAdmission,
  type CaptureAdmissionInput,
} from "#sdk/capture/admission.js";
import {
  EMPTY_EXTRAS_DIGEST,
  chainHash,
  extrasDigest,
  hashTokenIds,
  observeDigests,
  type DigestKind,
} from "#sdk/capture/digests.js";
import {
  CommitCoordsSchema,
  StagedCallRecordSchema,
  type StagedCallRecord,
} from "#sdk/capture/records.js";
import {
  RolloutTokenCapture,
  type ActiveCall,
  type BeginCallOptions,
} from "#sdk/capture/worker-capture.js";
import {
  MemorySink,
  childAdmission,
  countDigests,
  expectReason,
  hex,
  textAdmission,
} from "./helpers.js";

let version: number;
let sink: MemorySink;
let capture: RolloutTokenCapture;

beforeEach(() => {
  version = 7;
  sink = new MemorySink();
  capture = new RolloutTokenCapture({ sink, weightVersion: () => version });
});

function admit(input: CaptureAdmissionInput): CaptureAdmission {
  return CaptureAdmissionSchema.parse(input);
}

function begin(input: CaptureAdmissionInput, options?: BeginCallOptions): ActiveCall {
  return capture.beginCall(admit(input), options);
}

const logprobs = (ids: readonly number[]) => ids.map((_, i) => -0.25 * (i + 1));

/** The wire form of a record, to compare records field by field. */
function plain(record: StagedCallRecord): Record<string, unknown> {
  return JSON.parse(JSON.stringify(record));
}

/**
 * A cut: a live call of attempt `r` under `original` stages its prompt and `generated` tokens at
 * policy version `cutVersion`; the continuation names that snapshot.
 */
function cut(
  original: CaptureAdmissionInput,
  prompt: number[],
  generated: number[],
  cutVersion = 5,
) {
  const atCut = new RolloutTokenCapture({ sink, weightVersion: () => cutVersion });
  const call = atCut.beginCall(admit(original));
  const snapshot = atCut.buildPrefixRecord(call, {
    promptTokenIds: prompt,
    generatedTokenIds: generated,
    generatedLogprobs: logprobs(generated),
  });
  const key = `__generation_cut__/${snapshot.rollout_id}/${snapshot.model_call_id}`;
  const continuation = {
    source_capture_key: snapshot.rollout_id,
    source_model_call_id: snapshot.model_call_id,
    staging_keys: [key],
    prefix_token_count: generated.length,
    prefix_digest: snapshot.digest,
    effective_output_limit: 64,
  };
  return { snapshot, continuation, keys: [key] };
}

/** The replacement attempt's admission of the same call, continuing `continuation`. */
function replacement(
  original: CaptureAdmissionInput,
  continuation: unknown,
  overrides: Partial<CaptureAdmissionInput> = {},
): CaptureAdmissionInput {
  return {
    ...original,
    rollout_id: "r-a1",
    model_call_id: "c1-retry",
    generation_cut: continuation as CaptureAdmissionInput["generation_cut"],
    ...overrides,
  };
}

describe("beginCall: checks in order", () => {
  it("1. refuses an admission that is not a valid CaptureAdmission", () => {
    const invalid = { ...textAdmission(), parent_call_id: "c0" } as unknown as CaptureAdmission;
    expectReason(() => capture.beginCall(invalid, { stream: true }), "invalid_admission");
  });

  it("2. refuses a streaming response", () => {
    expectReason(
      () => begin(textAdmission(), { stream: true, prefixTokenIds: [-1] }),
      "streaming_unsupported",
    );
  });

  it("3. refuses supplied prefix IDs that are not non-negative integers", () => {
    expectReason(() => begin(childAdmission(), { prefixTokenIds: [1, -2, 3] }), "invalid_prefix");
    expectReason(() => begin(childAdmission(), { prefixTokenIds: [1, 2.5, 3] }), "invalid_prefix");
  });

  it("3. refuses a prefix for a text root, and takes an empty one", () => {
    expectReason(() => begin(textAdmission(), { prefixTokenIds: [1] }), "invalid_prefix");
    expect(begin(textAdmission(), { prefixTokenIds: [] }).prefixTokenIds).toEqual([]);
  });

  it("3. needs the resolved prefix of a staging-chain admission", () => {
    const chained = childAdmission({ required_prefix_token_ids: [], staging_chain: ["r/c0"] });
    expectReason(() => begin(chained), "invalid_prefix");
    expect(begin(chained, { prefixTokenIds: [4, 5, 6] }).prefixTokenIds).toEqual([4, 5, 6]);
  });

  it("3. refuses a supplied prefix of another length than prev_len", () => {
    expectReason(() => begin(childAdmission(), { prefixTokenIds: [1, 2] }), "invalid_prefix");
  });

  it("3. refuses a supplied prefix that conflicts with the inline one", () => {
    expectReason(() => begin(childAdmission(), { prefixTokenIds: [1, 2, 4] }), "invalid_prefix");
    expect(begin(childAdmission(), { prefixTokenIds: [1, 2, 3] }).prefixTokenIds).toEqual([
      1, 2, 3,
    ]);
  });

  it("3. uses the inline prefix when none is supplied", () => {
    expect(begin(childAdmission()).prefixTokenIds).toEqual([1, 2, 3]);
  });

  it.each([-1, 1.5, Number.NaN, "7" as unknown as number])(
    "4. refuses the weight version %s",
    (value) => {
      version = value;
      expectReason(() => begin(textAdmission()), "invalid_weight_version");
    },
  );

  it("4. reads the weight version after the prefix is resolved", () => {
    version = -1;
    expectReason(() => begin(textAdmission(), { prefixTokenIds: [1] }), "invalid_prefix");
  });

  it("stamps the current version on a fresh call", () => {
    const call = begin(textAdmission());
    expect(call).toMatchObject({
      weightVersion: 7,
      oldestWeightVersion: 7,
      generationCut: null,
      continuationPrompt: null,
      remainingOutputLimit: null,
      completed: false,
      rolloutId: "r",
      modelCallId: "c1",
    });
  });
});

describe("beginCall with a generation cut", () => {
  const original = childAdmission();
  const prompt = [1, 2, 3, 10, 11];
  const generated = [20, 21, 22];

  it("continues a valid prefix: prompt, budget and oldest policy version", () => {
    const { snapshot, continuation, keys } = cut(original, prompt, generated, 5);
    const call = begin(replacement(original, continuation), {
      generationCut: snapshot,
      generationCutStagingKeys: keys,
    });
    expect(call.generationCut).toBe(snapshot);
    expect(call.continuationPrompt).toEqual([1, 2, 3, 10, 11, 20, 21, 22]);
    expect(call.remainingOutputLimit).toBe(61);
    expect(call.weightVersion).toBe(7);
    expect(call.oldestWeightVersion).toBe(5);
  });

  it("validates a snapshot it did not build, and accepts a valid one", () => {
    const { snapshot, continuation, keys } = cut(original, prompt, generated);
    const call = begin(replacement(original, continuation), {
      generationCut: plain(snapshot) as never,
      generationCutStagingKeys: keys,
    });
    expect(call.generationCut?.digest).toBe(snapshot.digest);
  });

  it("5. refuses a snapshot the admission does not authorize", () => {
    const { snapshot, keys } = cut(original, prompt, generated);
    expectReason(
      () => begin(original, { generationCut: snapshot, generationCutStagingKeys: keys }),
      "generation_cut_not_authorized",
    );
  });

  it.each<[string, (keys: string[]) => string[] | undefined]>([
    ["missing", () => undefined],
    ["different", () => ["__generation_cut__/other"]],
    ["in another order", (keys) => [...keys, "extra"].reverse()],
  ])("5. refuses fetched staging keys that are %s", (_name, fetched) => {
    const { snapshot, continuation, keys } = cut(original, prompt, generated);
    const twoKeys = { ...continuation, staging_keys: [...keys, "extra"] };
    expectReason(
      () =>
        begin(replacement(original, twoKeys), {
          generationCut: snapshot,
          generationCutStagingKeys: fetched(keys),
        }),
      "generation_cut_keys_mismatch",
    );
  });

  it("5. refuses a snapshot that is not a valid staged record", () => {
    const { snapshot, continuation, keys } = cut(original, prompt, generated);
    const tampered = { ...plain(snapshot), token_ids_delta: [10, 11, 20, 21, 23] };
    expectReason(
      () =>
        begin(replacement(original, continuation), {
          generationCut: tampered as never,
          generationCutStagingKeys: keys,
        }),
      "invalid_generation_cut_snapshot",
    );
  });

  it.each<[string, Record<string, unknown>]>([
    ["source capture key", { source_capture_key: "r-a5" }],
    ["source call", { source_model_call_id: "c9" }],
    ["digest", { prefix_digest: hex("00") }],
  ])("5. refuses a snapshot whose identity differs: %s", (_name, change) => {
    const { snapshot, continuation, keys } = cut(original, prompt, generated);
    expectReason(
      () =>
        begin(replacement(original, { ...continuation, ...change }), {
          generationCut: snapshot,
          generationCutStagingKeys: keys,
        }),
      "generation_cut_identity_mismatch",
    );
  });

  it.each<[string, Partial<CaptureAdmissionInput>]>([
    ["parent call", { parent_call_id: "c9" }],
    ["prev_len", { prev_len: 4, required_prefix_token_ids: [1, 2, 3, 10] }],
    [
      "mode",
      {
        mode: "text",
        parent_call_id: null,
        prev_len: 0,
        required_prefix_token_ids: [],
        parent_chain_hash: null,
      },
    ],
  ])("5. refuses a snapshot whose lineage differs: %s", (_name, change) => {
    const { snapshot, continuation, keys } = cut(original, prompt, generated);
    expectReason(
      () =>
        begin(replacement(original, continuation, change), {
          generationCut: snapshot,
          generationCutStagingKeys: keys,
        }),
      "generation_cut_lineage_mismatch",
    );
  });

  it("5. refuses a prefix built on other parent tokens (chain hash recomputed)", () => {
    // Same parent call and length, but the parent's chain differs: a different token history.
    const other = childAdmission({ parent_chain_hash: hex("cd") });
    const { snapshot, continuation, keys } = cut(other, prompt, generated);
    expectReason(
      () =>
        begin(replacement(original, continuation), {
          generationCut: snapshot,
          generationCutStagingKeys: keys,
        }),
      "generation_cut_parent_tokens_mismatch",
    );
  });

  it("5. refuses a prefix whose cumulative tokens differ from the resolved prefix", () => {
    const other = childAdmission({ required_prefix_token_ids: [9, 9, 9] });
    const { snapshot, continuation, keys } = cut(other, [9, 9, 9, 10, 11], generated);
    expectReason(
      () =>
        begin(replacement(original, continuation), {
          generationCut: snapshot,
          generationCutStagingKeys: keys,
        }),
      "generation_cut_parent_tokens_mismatch",
    );
  });

  it("5. refuses a generated-token count other than the staged masks'", () => {
    const { snapshot, continuation, keys } = cut(original, prompt, generated);
    expectReason(
      () =>
        begin(replacement(original, { ...continuation, prefix_token_count: 4 }), {
          generationCut: snapshot,
          generationCutStagingKeys: keys,
        }),
      "generation_cut_token_count_mismatch",
    );
  });

  it("5. refuses a prefix from a newer policy version, and accepts the same version", () => {
    const newer = cut(original, prompt, generated, 8);
    expectReason(
      () =>
        begin(replacement(original, newer.continuation), {
          generationCut: newer.snapshot,
          generationCutStagingKeys: newer.keys,
        }),
      "generation_cut_policy_newer",
    );
    const same = cut(original, prompt, generated, 7);
    expect(
      begin(replacement(original, same.continuation), {
        generationCut: same.snapshot,
        generationCutStagingKeys: same.keys,
      }).oldestWeightVersion,
    ).toBe(7);
  });

  it("5. checks the keys before the snapshot's identity", () => {
    const { snapshot, continuation } = cut(original, prompt, generated);
    expectReason(
      () =>
        begin(replacement(original, { ...continuation, source_model_call_id: "c9" }), {
          generationCut: snapshot,
          generationCutStagingKeys: ["wrong"],
        }),
      "generation_cut_keys_mismatch",
    );
  });

  it("6. refuses a continuation without its staged snapshot", () => {
    const { continuation } = cut(original, prompt, generated);
    expectReason(
      () => begin(replacement(original, continuation)),
      "generation_cut_snapshot_required",
    );
  });
});

describe("buildPrefixRecord", () => {
  it("stages a text root's prompt masked 0 and its generation masked 1", () => {
    const call = begin(textAdmission());
    const record = capture.buildPrefixRecord(call, {
      promptTokenIds: [1, 2],
      generatedTokenIds: [3],
      generatedLogprobs: [-0.5],
      extras: { topk: [1, 2] },
    });
    expect(record).toMatchObject({
      rollout_id: "r",
      model_call_id: "c1",
      parent_call_id: null,
      mode: "text",
      prev_len: 0,
      delta_len: 3,
      cum_len: 3,
      weight_version: 7,
      token_ids_delta: [1, 2, 3],
      token_mask_delta: [0, 0, 1],
      generation_log_probs_delta: [0, 0, -0.5],
      extras: { topk: [1, 2] },
      extras_digest: extrasDigest({ topk: [1, 2] }),
      chain_hash: chainHash(null, [1, 2, 3]),
      cumulative_hash: hashTokenIds([1, 2, 3]),
    });
    expect(StagedCallRecordSchema.parse(plain(record)).digest).toBe(record.digest);
  });

  it("stages a child's delta past prev_len, chained on the parent", () => {
    const call = begin(childAdmission());
    const record = capture.buildPrefixRecord(call, {
      promptTokenIds: [1, 2, 3, 4],
      generatedTokenIds: [5],
      generatedLogprobs: [-1],
    });
    expect(record).toMatchObject({
      parent_call_id: "c0",
      prev_len: 3,
      delta_len: 2,
      cum_len: 5,
      token_ids_delta: [4, 5],
      chain_hash: chainHash(hex("ab"), [4, 5]),
      cumulative_hash: hashTokenIds([1, 2, 3, 4, 5]),
      extras_digest: EMPTY_EXTRAS_DIGEST,
    });
  });

  it("refuses a prompt that does not begin with the authorized prefix", () => {
    const call = begin(childAdmission());
    const tokens = {
      promptTokenIds: [1, 2, 9, 4],
      generatedTokenIds: [5],
      generatedLogprobs: [-1],
    };
    expectReason(() => capture.buildPrefixRecord(call, tokens), "prompt_mismatch");
  });

  it("does not complete the call", () => {
    const call = begin(textAdmission());
    capture.buildPrefixRecord(call, {
      promptTokenIds: [1],
      generatedTokenIds: [],
      generatedLogprobs: [],
    });
    expect(call.completed).toBe(false);
  });

  it("computes each digest once", () => {
    const call = begin(childAdmission());
    const { counts } = countDigests(() =>
      capture.buildPrefixRecord(call, {
        promptTokenIds: [1, 2, 3, 4],
        generatedTokenIds: [5],
        generatedLogprobs: [-1],
      }),
    );
    expect(counts).toEqual({ cumulative: 1, chain: 1, extras: 1, staging: 1 });
  });

  describe("for a continued call", () => {
    const original = childAdmission();

    function continued(cutVersion = 5) {
      const { snapshot, continuation, keys } = cut(original, [1, 2, 3, 10], [20, 21], cutVersion);
      const call = begin(replacement(original, continuation), {
        generationCut: snapshot,
        generationCutStagingKeys: keys,
      });
      return { snapshot, call };
    }

    it("is the old prefix plus the new tail, stamped with the oldest policy version", () => {
      const { call } = continued(5);
      const record = capture.buildPrefixRecord(call, {
        promptTokenIds: [1, 2, 3, 10, 20, 21],
        generatedTokenIds: [22, 23],
        generatedLogprobs: [-2, -3],
      });
      expect(record).toMatchObject({
        rollout_id: "r-a1",
        model_call_id: "c1-retry",
        weight_version: 5,
        token_ids_delta: [10, 20, 21, 22, 23],
        token_mask_delta: [0, 1, 1, 1, 1],
        generation_log_probs_delta: [0, -0.25, -0.5, -2, -3],
        cum_len: 8,
      });
    });

    it("refuses a prompt other than the durable prefix", () => {
      const { call } = continued();
      const tokens = {
        promptTokenIds: [1, 2, 3, 10, 20],
        generatedTokenIds: [22],
        generatedLogprobs: [-2],
      };
      expectReason(() => capture.buildPrefixRecord(call, tokens), "prompt_mismatch");
    });

    it("refuses generated columns of unequal length", () => {
      const { call } = continued();
      const tokens = {
        promptTokenIds: [1, 2, 3, 10, 20, 21],
        generatedTokenIds: [22],
        generatedLogprobs: [],
      };
      expectReason(() => capture.buildPrefixRecord(call, tokens), "invalid_record");
    });
  });

  it("of a continued call equals a record built in one go over the concatenated tokens", () => {
    const ids = (min: number) =>
      fc.array(fc.integer({ min: 0, max: 50_000 }), { minLength: min, maxLength: 8 });
    fc.assert(
      fc.property(
        fc.boolean(),
        ids(1),
        ids(0),
        ids(0),
        fc.integer({ min: 0, max: 3 }),
        (rooted, prompt, first, second, cutVersion) => {
          const prefix = prompt.slice(0, rooted ? 0 : Math.min(2, prompt.length - 1));
          const original = rooted
            ? textAdmission()
            : childAdmission({ prev_len: prefix.length, required_prefix_token_ids: prefix });
          fc.pre(rooted || prefix.length > 0);
          const { snapshot, continuation, keys } = cut(original, prompt, first, cutVersion);
          const resumed = begin(replacement(original, continuation), {
            generationCut: snapshot,
            generationCutStagingKeys: keys,
          });
          const tail = {
            promptTokenIds: resumed.continuationPrompt ?? [],
            generatedTokenIds: second,
            generatedLogprobs: logprobs(second).map((p) => p - 10),
          };
          const pieced = capture.buildPrefixRecord(resumed, tail);
          const whole = capture.buildPrefixRecord(begin(replacement(original, null)), {
            promptTokenIds: prompt,
            generatedTokenIds: [...first, ...second],
            generatedLogprobs: [...logprobs(first), ...tail.generatedLogprobs],
          });
          for (const field of [
            "token_ids_delta",
            "token_mask_delta",
            "generation_log_probs_delta",
            "delta_len",
            "cum_len",
            "chain_hash",
            "cumulative_hash",
          ] as const) {
            expect(pieced[field]).toEqual(whole[field]);
          }
          expect(pieced.weight_version).toBe(Math.min(cutVersion, 7));
        },
      ),
    );
  });

  it("chains a lineage: a child's hashes compose on its parent's record", () => {
    fc.assert(
      fc.property(
        fc.array(fc.nat(1000), { minLength: 1, maxLength: 6 }),
        fc.array(fc.nat(1000), { maxLength: 6 }),
        fc.array(fc.nat(1000), { minLength: 1, maxLength: 6 }),
        fc.array(fc.nat(1000), { maxLength: 6 }),
        (prompt, out, turn, reply) => {
          const root = capture.buildPrefixRecord(begin(textAdmission()), {
            promptTokenIds: prompt,
            generatedTokenIds: out,
            generatedLogprobs: logprobs(out),
          });
          const history = [...prompt, ...out];
          const child = capture.buildPrefixRecord(
            begin({
              rollout_id: "r",
              model_call_id: "c2",
              parent_call_id: "c1",
              prev_len: history.length,
              mode: "token_in",
              required_prefix_token_ids: history,
              parent_chain_hash: root.chain_hash,
            }),
            {
              promptTokenIds: [...history, ...turn],
              generatedTokenIds: reply,
              generatedLogprobs: logprobs(reply),
            },
          );
          expect(child.chain_hash).toBe(chainHash(root.chain_hash, [...turn, ...reply]));
          expect(child.cumulative_hash).toBe(hashTokenIds([...history, ...turn, ...reply]));
          expect(child.cum_len).toBe(root.cum_len + turn.length + reply.length);
        },
      ),
      { numRuns: 50 },
    );
  });
});

describe("buildGenerationChunkRecord", () => {
  it("stages only the generated tokens, masked 1, without extras", () => {
    const call = begin(childAdmission());
    const record = capture.buildGenerationChunkRecord(call, {
      generatedTokenIds: [7, 8],
      generatedLogprobs: [-1, -2],
    });
    expect(record).toMatchObject({
      prev_len: 3,
      delta_len: 2,
      cum_len: 5,
      weight_version: 7,
      token_ids_delta: [7, 8],
      token_mask_delta: [1, 1],
      generation_log_probs_delta: [-1, -2],
      extras: null,
      extras_digest: EMPTY_EXTRAS_DIGEST,
      chain_hash: chainHash(hex("ab"), [7, 8]),
      cumulative_hash: hashTokenIds([1, 2, 3, 7, 8]),
    });
    expect(StagedCallRecordSchema.parse(plain(record)).digest).toBe(record.digest);
  });

  it("stamps the current policy version, not the oldest", () => {
    const original = childAdmission();
    const { snapshot, continuation, keys } = cut(original, [1, 2, 3, 10], [20], 5);
    const call = begin(replacement(original, continuation), {
      generationCut: snapshot,
      generationCutStagingKeys: keys,
    });
    const record = capture.buildGenerationChunkRecord(call, {
      generatedTokenIds: [21],
      generatedLogprobs: [-1],
    });
    expect(record.weight_version).toBe(7);
  });

  it("refuses an empty chunk and unequal columns", () => {
    const call = begin(textAdmission());
    expectReason(
      () =>
        capture.buildGenerationChunkRecord(call, { generatedTokenIds: [], generatedLogprobs: [] }),
      "invalid_record",
    );
    expectReason(
      () =>
        capture.buildGenerationChunkRecord(call, { generatedTokenIds: [1], generatedLogprobs: [] }),
      "invalid_record",
    );
  });

  it("computes the staging digest once", () => {
    const call = begin(textAdmission());
    const { counts } = countDigests(() =>
      capture.buildGenerationChunkRecord(call, { generatedTokenIds: [1], generatedLogprobs: [-1] }),
    );
    expect(counts.staging).toBe(1);
  });
});

describe("completeCall", () => {
  const tokens = { promptTokenIds: [1, 2, 3, 4], generatedTokenIds: [5], generatedLogprobs: [-1] };

  it("stages the record before answering its staged coordinates", async () => {
    const call = begin(childAdmission());
    const coords = await capture.completeCall(call, tokens);
    const [record] = sink.staged;
    expect(record).toBeDefined();
    expect(coords).toEqual(
      CommitCoordsSchema.parse({
        rollout_id: "r",
        model_call_id: "c1",
        parent_call_id: "c0",
        prev_len: 3,
        delta_len: 2,
        cum_len: 5,
        weight_version: 7,
        digest: record?.digest,
        extras_digest: EMPTY_EXTRAS_DIGEST,
        staging_key: "r/c1",
        chain_hash: record?.chain_hash,
        cumulative_hash: record?.cumulative_hash,
      }),
    );
    expect(call.completed).toBe(true);
  });

  it("builds through buildPrefixRecord: a continued call stages old prefix plus new tail", async () => {
    const original = childAdmission();
    const { snapshot, continuation, keys } = cut(original, [1, 2, 3, 10], [20], 5);
    const call = begin(replacement(original, continuation), {
      generationCut: snapshot,
      generationCutStagingKeys: keys,
    });
    const tail = {
      promptTokenIds: [1, 2, 3, 10, 20],
      generatedTokenIds: [21],
      generatedLogprobs: [-2],
    };
    const expected = capture.buildPrefixRecord(call, tail);
    const coords = await capture.completeCall(call, tail);
    expect(plain(sink.staged[0] as StagedCallRecord)).toEqual(plain(expected));
    expect(coords.weight_version).toBe(5);
  });

  it("computes the staging digest once", async () => {
    const call = begin(childAdmission());
    const counts: Partial<Record<DigestKind, number>> = {};
    const stop = observeDigests((kind) => {
      counts[kind] = (counts[kind] ?? 0) + 1;
    });
    try {
      await capture.completeCall(call, tokens);
    } finally {
      stop();
    }
    expect(counts.staging).toBe(1);
  });

  it("refuses a second completion", async () => {
    const call = begin(childAdmission());
    await capture.completeCall(call, tokens);
    await expect(capture.completeCall(call, tokens)).rejects.toMatchObject({
      reason: "already_completed",
    });
    expectReason(() => capture.failCall(call, "late"), "already_completed");
    expect(sink.staged).toHaveLength(1);
  });

  it("answers capture_failed, claimed and unstaged, when the record cannot be built", async () => {
    const call = begin(childAdmission());
    const coords = await capture.completeCall(call, { ...tokens, promptTokenIds: [9, 9, 9, 4] });
    expect(coords).toMatchObject({
      disposition: "capture_failed",
      delta_len: 0,
      cum_len: 3,
      digest: null,
      staging_key: null,
    });
    expect(sink.staged).toHaveLength(0);
    expect(call.completed).toBe(true);
    await expect(capture.completeCall(call, tokens)).rejects.toMatchObject({
      reason: "already_completed",
    });
  });

  it.each<[string, (record: StagedCallRecord) => unknown]>([
    [
      "throws",
      () => {
        throw new Error("disk full");
      },
    ],
    ["rejects", () => Promise.reject(new Error("disk full"))],
    ["answers a success without a key", () => ({ ok: true })],
    ["answers something else", () => "ok"],
    ["refuses", () => ({ ok: false, error: "quota" })],
  ])("answers capture_failed when the sink %s", async (_name, answer) => {
    sink.answer = answer as MemorySink["answer"];
    const call = begin(childAdmission());
    const coords = await capture.completeCall(call, tokens);
    expect(coords.disposition).toBe("capture_failed");
    expect(call.completed).toBe(true);
  });

  it("claims the call before the sink runs", async () => {
    let claimedWhileStaging = false;
    const call = begin(childAdmission());
    sink.answer = (record) => {
      claimedWhileStaging = call.completed;
      return { schema_version: 2, ok: true, staging_key: record.model_call_id, error: null };
    };
    await capture.completeCall(call, tokens);
    expect(claimedWhileStaging).toBe(true);
  });
});

describe("failCall", () => {
  it("claims the call, logs the reason and answers capture_failed", () => {
    const lines: string[] = [];
    const logged = new RolloutTokenCapture({
      sink,
      weightVersion: () => 3,
      logger: pino({ level: "warn" }, { write: (line: string) => lines.push(line) }),
    });
    const call = logged.beginCall(admit(childAdmission()));
    expect(logged.failCall(call, "engine aborted")).toEqual(
      CommitCoordsSchema.parse({
        rollout_id: "r",
        model_call_id: "c1",
        parent_call_id: "c0",
        prev_len: 3,
        delta_len: 0,
        cum_len: 3,
        weight_version: 3,
        disposition: "capture_failed",
      }),
    );
    expect(call.completed).toBe(true);
    expect(lines.join("")).toContain("engine aborted");
    expectReason(() => logged.failCall(call, "again"), "already_completed");
  });
});
