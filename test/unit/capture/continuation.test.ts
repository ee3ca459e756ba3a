/** GenerationCutContinuation, the cut record, EpisodeCut and the output budget. */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  EpisodeCutSchema,
  GenerationCutContinuationSchema,
  GenerationCutRecordSchema,
  generationCutRecordFromAck,
  generationCutRecordFromWire,
  remainingOutputLimit,
  type GenerationCutContinuation,
} from "#sdk/capture/continuation.js";
import { conversationDigest } from "#sdk/capture/fingerprints.js";
import {
  GenerationCutPrefixAckSchema,
  generationCutFailureAck,
} from "#sdk/capture/generation-cut.js";
import { expectAgreesWithSchema, mostly, throughJson } from "../../support/fast-path.js";
import { expectReason, hex } from "./helpers.js";

const continuation = {
  source_capture_key: "r",
  source_model_call_id: "c1",
  staging_keys: ["__generation_cut__/r/c1"],
  prefix_token_count: 5,
  prefix_digest: hex("cd"),
  effective_output_limit: 1024,
};

describe("GenerationCutContinuationSchema", () => {
  it("accepts a continuation and fills the defaults", () => {
    expect(GenerationCutContinuationSchema.parse(continuation)).toEqual({
      ...continuation,
      schema_version: 2,
      terminal_finish_reason: null,
      terminal_stop_reason: null,
    });
  });

  it.each<[string, Record<string, unknown>]>([
    ["no staging keys", { staging_keys: [] }],
    ["a repeated staging key", { staging_keys: ["k", "k"] }],
    ["an empty staging key", { staging_keys: [""] }],
    ["a stop reason without a finish reason", { terminal_stop_reason: "</s>" }],
    ["a negative prefix token count", { prefix_token_count: -1 }],
    ["an output limit of 0", { effective_output_limit: 0 }],
    ["a prefix digest that is not a digest", { prefix_digest: "cd" }],
    ["an unknown finish reason", { terminal_finish_reason: "tool_calls" }],
    ["an empty source capture key", { source_capture_key: "" }],
    ["an unknown field", { digest: hex("cd") }],
  ])("refuses %s", (_name, overrides) => {
    expect(
      GenerationCutContinuationSchema.safeParse({ ...continuation, ...overrides }).success,
    ).toBe(false);
  });

  it("accepts a stop token ID or string with a finish reason", () => {
    for (const reason of ["</s>", 2]) {
      const value = {
        ...continuation,
        terminal_finish_reason: "stop",
        terminal_stop_reason: reason,
      };
      expect(GenerationCutContinuationSchema.safeParse(value).success).toBe(true);
    }
  });
});

describe("remainingOutputLimit", () => {
  const parsed = (overrides: Partial<GenerationCutContinuation> = {}) => ({
    ...GenerationCutContinuationSchema.parse(continuation),
    ...overrides,
  });

  it("subtracts the generated prefix from the original budget", () => {
    expect(remainingOutputLimit(parsed())).toBe(1019);
  });

  it("never goes below zero", () => {
    expect(remainingOutputLimit(parsed({ prefix_token_count: 2000 }))).toBe(0);
  });

  it("is zero for a cut that captured a finished generation", () => {
    expect(remainingOutputLimit(parsed({ terminal_finish_reason: "length" }))).toBe(0);
  });
});

describe("GenerationCutRecordSchema and EpisodeCutSchema", () => {
  const record = { model_call_id: "c1", request_digest: hex("ee"), continuation };

  it("accept a cut record and default admitted_at to 0", () => {
    expect(GenerationCutRecordSchema.safeParse(record).success).toBe(true);
    expect(EpisodeCutSchema.parse({ capture_key: "r", record }).admitted_at).toBe(0);
  });

  it("refuse unknown fields", () => {
    expect(GenerationCutRecordSchema.safeParse({ ...record, x: 1 }).success).toBe(false);
    expect(EpisodeCutSchema.safeParse({ capture_key: "r", record, x: 1 }).success).toBe(false);
  });
});

describe("generationCutRecordFromAck", () => {
  const prefix = {
    ticket_id: "t1",
    rollout_id: "r",
    attempt: 0,
    model_call_id: "c1",
    admitted_at: 5,
  };
  const items = [{ role: "user", content: "hi" }];

  it("builds the record from a durable prefix ack and the request items", () => {
    const ack = GenerationCutPrefixAckSchema.parse({
      ...prefix,
      disposition: "durable_prefix",
      cut_kind: "active_prefix",
      frozen_buffer_id: "buf-1",
      staging_keys: ["__generation_cut__/r/c1"],
      prefix_token_count: 5,
      prefix_digest: hex("cd"),
      effective_output_limit: 1024,
      terminal_finish_reason: "stop",
      terminal_stop_reason: 2,
    });
    expect(generationCutRecordFromAck(ack, { captureKey: "r", requestItems: items })).toEqual({
      model_call_id: "c1",
      request_digest: conversationDigest(items),
      continuation: {
        ...continuation,
        schema_version: 2,
        terminal_finish_reason: "stop",
        terminal_stop_reason: 2,
      },
    });
  });

  it("digests missing request items as an empty conversation", () => {
    const ack = GenerationCutPrefixAckSchema.parse({
      ...prefix,
      disposition: "durable_prefix",
      cut_kind: "active_prefix",
      frozen_buffer_id: "buf-1",
      staging_keys: ["k"],
      prefix_token_count: 0,
      prefix_digest: hex("cd"),
      effective_output_limit: 1,
    });
    const record = generationCutRecordFromAck(ack, { captureKey: "r", requestItems: null });
    expect(record.request_digest).toBe(conversationDigest([]));
  });

  it("builds, from any durable ack, exactly what GenerationCutRecordSchema parses (key order too)", () => {
    const ackArb = fc.record({
      staging_keys: fc.uniqueArray(fc.constantFrom("k1", "k2", "", "__generation_cut__/r/c1"), {
        minLength: 1,
        maxLength: 3,
      }),
      prefix_token_count: fc.nat(10),
      effective_output_limit: fc.integer({ min: 1, max: 50 }),
      terminal: fc.constantFrom<[string | null, string | number | null]>(
        [null, null],
        ["stop", null],
        ["length", 7],
        ["stop", "eos"],
      ),
      captureKey: fc.constantFrom("r", "r-a1", ""),
    });
    fc.assert(
      fc.property(ackArb, (a) => {
        const ack = GenerationCutPrefixAckSchema.parse({
          ...prefix,
          disposition: "durable_prefix",
          cut_kind: "active_prefix",
          frozen_buffer_id: "buf-1",
          staging_keys: a.staging_keys,
          prefix_token_count: a.prefix_token_count,
          prefix_digest: hex("cd"),
          effective_output_limit: a.effective_output_limit,
          terminal_finish_reason: a.terminal[0],
          terminal_stop_reason: a.terminal[1],
        });
        const source = { captureKey: a.captureKey, requestItems: items };
        const raw = {
          model_call_id: ack.model_call_id,
          request_digest: conversationDigest(items),
          continuation: {
            source_capture_key: a.captureKey,
            source_model_call_id: ack.model_call_id,
            staging_keys: ack.staging_keys,
            prefix_token_count: ack.prefix_token_count,
            prefix_digest: ack.prefix_digest,
            effective_output_limit: ack.effective_output_limit,
            terminal_finish_reason: ack.terminal_finish_reason,
            terminal_stop_reason: ack.terminal_stop_reason,
          },
        };
        const parsed = GenerationCutRecordSchema.safeParse(raw);
        if (parsed.success) {
          expect(JSON.stringify(generationCutRecordFromAck(ack, source))).toBe(
            JSON.stringify(parsed.data),
          );
        } else {
          expectReason(() => generationCutRecordFromAck(ack, source), "invalid_wire_value");
        }
      }),
      { numRuns: 300 },
    );
  });

  it("refuses a failure ack", () => {
    expectReason(
      () =>
        generationCutRecordFromAck(generationCutFailureAck(prefix), {
          captureKey: "r",
          requestItems: items,
        }),
      "not_durable_prefix",
    );
  });
});

describe("generationCutRecordFromWire", () => {
  const maybe = (good: fc.Arbitrary<unknown>, bad?: fc.Arbitrary<unknown>) => mostly(good, bad, 60);
  const continuation = fc.record(
    {
      schema_version: maybe(fc.constant(2), fc.constant(1)),
      source_capture_key: maybe(fc.constantFrom("r", "r-a1")),
      source_model_call_id: maybe(fc.constant("c1")),
      staging_keys: maybe(
        fc.constantFrom(["k1"], ["k1", "k2"]),
        fc.constantFrom([], ["k1", "k1"], [""], [3]),
      ),
      prefix_token_count: maybe(fc.nat(9)),
      prefix_digest: maybe(fc.constant("a".repeat(64)), fc.constantFrom("A".repeat(64), "ab")),
      effective_output_limit: maybe(fc.integer({ min: 1, max: 9 }), fc.constant(0)),
      terminal_finish_reason: maybe(fc.constantFrom("stop", "length", null), fc.constant("other")),
      terminal_stop_reason: maybe(fc.constantFrom(null, null, "</s>", 2, -3), fc.constant(2.5)),
    },
    { requiredKeys: [] },
  );
  const record = fc.record(
    {
      model_call_id: maybe(fc.constantFrom("c1", "")),
      request_digest: maybe(fc.constant("d".repeat(64))),
      continuation: maybe(continuation),
    },
    { requiredKeys: [] },
  );

  /** Stored records as they read back from JSON, sometimes with a key the schema refuses. */
  const stored = fc.tuple(record, fc.boolean()).map(([raw, extraKey]) => {
    const value = throughJson(raw) as Record<string, unknown> | null;
    const inner = value?.continuation;
    if (extraKey && inner !== null && typeof inner === "object" && !Array.isArray(inner)) {
      (inner as Record<string, unknown>).surprise = 1;
    }
    return value;
  });

  it("answers what GenerationCutRecordSchema answers, or null where the schema refuses", () => {
    expectAgreesWithSchema({
      values: stored,
      fast: generationCutRecordFromWire,
      slow: (value) => GenerationCutRecordSchema.safeParse(value),
      takesEveryValid: true,
      minTaken: 10,
      numRuns: 2000,
    });
  });
});
