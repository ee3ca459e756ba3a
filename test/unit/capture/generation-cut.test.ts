/** Generation-cut wire models and the receipt-versus-inventory check. */
import { createHash } from "node:crypto";
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  GenerationCutInventorySchema,
  GenerationCutPrefixAckSchema,
  GenerationCutPrefixSchema,
  GenerationCutReceiptReplySchema,
  GenerationCutReceiptSchema,
  buildGenerationCutInventory,
  generationCutFailureAck,
  generationCutInventoryFromWire,
  inventoryDigest,
  parseGenerationCutReceipt,
  validateReceiptFor,
  type GenerationCutInventory,
  type GenerationCutPrefix,
  type GenerationCutReceipt,
} from "#sdk/capture/generation-cut.js";
import { pyFloat, pythonJson } from "#sdk/capture/python-json.js";
import { expectAgreesWithSchema, mostly, throughJson } from "../../support/fast-path.js";
import { expectReason, hex } from "./helpers.js";

const t2: GenerationCutPrefix = {
  ticket_id: "t2",
  rollout_id: "r",
  attempt: 1,
  model_call_id: "c2",
  admitted_at: 1700000000,
};
const t10: GenerationCutPrefix = {
  ticket_id: "t10",
  rollout_id: "r",
  attempt: 0,
  model_call_id: "c1",
  admitted_at: 0.00001,
};

function inventory(): GenerationCutInventory {
  return buildGenerationCutInventory({
    checkpoint_id: "ckpt-1",
    server_name: "policé",
    active_prefixes: [t2, t10],
  });
}

describe("inventory_digest", () => {
  it("hashes Python's sorted-key, compact, ASCII-escaped JSON with float admitted_at", () => {
    // json.dumps(payload, sort_keys=True, separators=(",", ":")), written out by hand: keys
    // sorted at every level, 1e-05 and 1700000000.0 as Python floats, é as \u00e9.
    const text =
      '{"active_prefixes":[' +
      '{"admitted_at":1e-05,"attempt":0,"model_call_id":"c1","rollout_id":"r","ticket_id":"t10"},' +
      '{"admitted_at":1700000000.0,"attempt":1,"model_call_id":"c2","rollout_id":"r","ticket_id":"t2"}' +
      '],"checkpoint_id":"ckpt-1","server_name":"polic\\u00e9"}';
    const expected = createHash("sha256").update(text, "utf8").digest("hex");
    expect(inventory().inventory_digest).toBe(expected);
    expect(expected).toBe("705599ad98c544291371ad437764e35621f1eb58b317e4fe8ef8d7ee2e39b9d0");
  });

  it("equals the digest of pythonJson of the whole payload, for a round of thousands of calls", () => {
    const prefixes = Array.from({ length: 3_000 }, (_, i) => ({
      ticket_id: `ticket-${i}`,
      rollout_id: `rollout-${i % 97}`,
      attempt: i % 3,
      model_call_id: `call_${i}`,
      admitted_at: 1_796_150_540 + i / 7,
    }));
    const fields = { checkpoint_id: "ckpt-9", server_name: "policé" };
    const payload = {
      ...fields,
      active_prefixes: prefixes.map((p) => ({ ...p, admitted_at: pyFloat(p.admitted_at) })),
    };
    const whole = createHash("sha256").update(pythonJson(payload), "utf8").digest("hex");
    expect(inventoryDigest({ ...fields, active_prefixes: prefixes })).toBe(whole);
  });

  it("checks each prefix exactly as GenerationCutPrefixSchema does", () => {
    const field = <T>(...values: T[]) => fc.constantFrom(...values);
    const prefixArb = fc.record(
      {
        ticket_id: field<unknown>("t1", "", 7),
        rollout_id: field<unknown>("r", "task-3", ".r", "", "a b"),
        attempt: field<unknown>(0, 2, -1, 1.5, -0, 2 ** 53, "1"),
        model_call_id: field<unknown>("c1", "", null),
        admitted_at: field<unknown>(1.5, 0, -3, Number.NaN, Number.POSITIVE_INFINITY, "1"),
        extra: field<unknown>(1),
      },
      { requiredKeys: [] },
    );
    fc.assert(
      fc.property(prefixArb, (prefix) => {
        const build = () =>
          buildGenerationCutInventory({
            checkpoint_id: "c",
            server_name: "s",
            active_prefixes: [prefix as never],
          }).active_prefixes[0];
        const parsed = GenerationCutPrefixSchema.safeParse(prefix);
        if (parsed.success) expect(build()).toEqual(parsed.data);
        else expect(build).toThrow("invalid generation-cut prefix");
      }),
      { numRuns: 500 },
    );
  });

  it("orders the prefixes by ticket_id as strings (t10 before t2)", () => {
    expect(inventory().active_prefixes.map((p) => p.ticket_id)).toEqual(["t10", "t2"]);
  });

  it("depends on the prefix order it is given", () => {
    const fields = { checkpoint_id: "c", server_name: "s" };
    expect(inventoryDigest({ ...fields, active_prefixes: [t2, t10] })).not.toBe(
      inventoryDigest({ ...fields, active_prefixes: [t10, t2] }),
    );
  });

  it("digests an empty inventory", () => {
    const text = '{"active_prefixes":[],"checkpoint_id":"c","server_name":"s"}';
    expect(
      buildGenerationCutInventory({ checkpoint_id: "c", server_name: "s", active_prefixes: [] })
        .inventory_digest,
    ).toBe(createHash("sha256").update(text).digest("hex"));
  });

  it("refuses an invalid prefix", () => {
    expectReason(
      () =>
        buildGenerationCutInventory({
          checkpoint_id: "c",
          server_name: "s",
          active_prefixes: [{ ...t2, rollout_id: "-r" }],
        }),
      "invalid_wire_value",
    );
  });
});

describe("GenerationCutPrefixSchema and GenerationCutInventorySchema", () => {
  it.each<[string, Record<string, unknown>]>([
    ["an empty ticket ID", { ticket_id: "" }],
    ["a rollout ID outside the ID pattern", { rollout_id: ".r" }],
    ["a negative attempt", { attempt: -1 }],
    ["an empty model call ID", { model_call_id: "" }],
    ["admitted_at as a string", { admitted_at: "1" }],
    ["an unknown field", { capture_key: "r" }],
  ])("a prefix refuses %s", (_name, overrides) => {
    expect(GenerationCutPrefixSchema.safeParse({ ...t2, ...overrides }).success).toBe(false);
  });

  it("an inventory refuses unknown fields and a malformed digest", () => {
    const wire = JSON.parse(JSON.stringify(inventory()));
    expect(GenerationCutInventorySchema.safeParse(wire).success).toBe(true);
    expect(GenerationCutInventorySchema.safeParse({ ...wire, x: 1 }).success).toBe(false);
    expect(
      GenerationCutInventorySchema.safeParse({ ...wire, inventory_digest: "ab" }).success,
    ).toBe(false);
  });
});

const evidence = {
  cut_kind: "active_prefix",
  frozen_buffer_id: "buf-1",
  staging_keys: ["__generation_cut__/r/c2"],
  prefix_token_count: 3,
  prefix_digest: hex("cd"),
  effective_output_limit: 64,
};

function ack(prefix: GenerationCutPrefix, extra: Record<string, unknown> = evidence) {
  return GenerationCutPrefixAckSchema.parse({ ...prefix, disposition: "durable_prefix", ...extra });
}

describe("GenerationCutPrefixAckSchema", () => {
  it("accepts a durable prefix with all its evidence", () => {
    expect(ack(t2).staging_keys).toEqual(["__generation_cut__/r/c2"]);
  });

  it.each([
    "cut_kind",
    "frozen_buffer_id",
    "prefix_token_count",
    "prefix_digest",
    "effective_output_limit",
  ])("a durable prefix requires %s", (field) => {
    const value = { ...t2, disposition: "durable_prefix", ...evidence, [field]: null };
    expect(GenerationCutPrefixAckSchema.safeParse(value).success).toBe(false);
  });

  it("a durable prefix requires staging keys", () => {
    const value = { ...t2, disposition: "durable_prefix", ...evidence, staging_keys: [] };
    expect(GenerationCutPrefixAckSchema.safeParse(value).success).toBe(false);
  });

  it.each(Object.entries(evidence))("a durable failure cannot carry %s", (field, value) => {
    const failure = { ...t2, disposition: "durable_failure", [field]: value };
    expect(GenerationCutPrefixAckSchema.safeParse(failure).success).toBe(false);
  });

  it("a stop reason requires a finish reason", () => {
    const value = { ...t2, disposition: "durable_prefix", ...evidence, terminal_stop_reason: 2 };
    expect(GenerationCutPrefixAckSchema.safeParse(value).success).toBe(false);
    expect(
      GenerationCutPrefixAckSchema.safeParse({ ...value, terminal_finish_reason: "stop" }).success,
    ).toBe(true);
  });

  it("staging keys must be unique", () => {
    const value = { ...t2, disposition: "durable_prefix", ...evidence, staging_keys: ["k", "k"] };
    expect(GenerationCutPrefixAckSchema.safeParse(value).success).toBe(false);
  });

  it("refuses an unknown disposition, cut kind and field", () => {
    for (const extra of [{ disposition: "lost" }, { cut_kind: "partial" }, { note: 1 }]) {
      expect(
        GenerationCutPrefixAckSchema.safeParse({
          ...t2,
          disposition: "durable_prefix",
          ...evidence,
          ...extra,
        }).success,
      ).toBe(false);
    }
  });

  it("the failure ack copies the identity and carries no evidence", () => {
    expect(generationCutFailureAck(t2)).toEqual({
      ...t2,
      disposition: "durable_failure",
      cut_kind: null,
      frozen_buffer_id: null,
      staging_keys: [],
      prefix_token_count: null,
      prefix_digest: null,
      effective_output_limit: null,
      terminal_finish_reason: null,
      terminal_stop_reason: null,
    });
  });
});

function receipt(inv: GenerationCutInventory, overrides: Partial<GenerationCutReceipt> = {}) {
  return GenerationCutReceiptSchema.parse(
    JSON.parse(
      JSON.stringify({
        checkpoint_id: inv.checkpoint_id,
        cut_id: "cut-1",
        inventory_digest: inv.inventory_digest,
        inventory: inv,
        backend_snapshot_id: "snap-1",
        prefixes: [ack(t10), generationCutFailureAck(t2)],
        ...overrides,
      }),
    ),
  );
}

/** A receipt read as the model server reads it: the echoed inventory left raw. */
function replyOf(wire: Record<string, unknown>) {
  return GenerationCutReceiptReplySchema.parse(JSON.parse(JSON.stringify(wire)));
}

describe("validateReceiptFor, the echoed inventory left raw", () => {
  const wireOf = (inv: GenerationCutInventory, echo: unknown) => ({
    checkpoint_id: inv.checkpoint_id,
    cut_id: "cut-1",
    inventory_digest: inv.inventory_digest,
    inventory: echo,
    backend_snapshot_id: "snap-1",
    prefixes: [ack(t10), generationCutFailureAck(t2)],
  });

  it("accepts the exact echo", () => {
    const inv = inventory();
    expect(() => validateReceiptFor(replyOf(wireOf(inv, inv)), inv)).not.toThrow();
  });

  it.each([
    ["not an object", () => "inventory"],
    ["null", () => null],
    ["with a member of its own", (inv: GenerationCutInventory) => ({ ...inv, note: 1 })],
    [
      "with a prefix holding a member of its own",
      (inv: GenerationCutInventory) => ({
        ...inv,
        active_prefixes: inv.active_prefixes.map((p, i) => (i === 0 ? { ...p, x: 1 } : p)),
      }),
    ],
    [
      "with a prefix missing a member",
      (inv: GenerationCutInventory) => ({
        ...inv,
        active_prefixes: inv.active_prefixes.map(({ attempt: _attempt, ...p }) => p),
      }),
    ],
    [
      "with prefixes that are not a list",
      (inv: GenerationCutInventory) => ({ ...inv, active_prefixes: {} }),
    ],
    [
      "with a prefix of another type",
      (inv: GenerationCutInventory) => ({
        ...inv,
        active_prefixes: inv.active_prefixes.map((p) => ({ ...p, attempt: String(p.attempt) })),
      }),
    ],
  ])("refuses an echo %s", (_, echoOf) => {
    const inv = inventory();
    expectReason(
      () => validateReceiptFor(replyOf(wireOf(inv, echoOf(inv))), inv),
      "receipt_inventory_mismatch",
    );
  });

  it("an echo without active_prefixes answers an empty inventory", () => {
    const inv = buildGenerationCutInventory({
      checkpoint_id: "c",
      server_name: "s",
      active_prefixes: [],
    });
    const { active_prefixes: _prefixes, ...echo } = inv;
    expect(() =>
      validateReceiptFor(replyOf({ ...wireOf(inv, echo), prefixes: [] }), inv),
    ).not.toThrow();
  });
});

describe("parseGenerationCutReceipt", () => {
  it("parses any receipt exactly as GenerationCutReceiptReplySchema does, or refuses it too", () => {
    const durable = {
      ticket_id: "t10",
      rollout_id: "r",
      attempt: 0,
      model_call_id: "c1",
      admitted_at: 0.00001,
      disposition: "durable_prefix",
      cut_kind: "active_prefix",
      frozen_buffer_id: "buf",
      staging_keys: ["k"],
      prefix_token_count: 3,
      prefix_digest: hex("cd"),
      effective_output_limit: 8,
    };
    const failure = { ...t10, disposition: "durable_failure" };
    // A valid ack with at most two fields changed (or dropped): mostly valid, often one rule off.
    const change = fc.tuple(
      fc.constantFrom(
        "ticket_id",
        "rollout_id",
        "attempt",
        "admitted_at",
        "disposition",
        "cut_kind",
        "frozen_buffer_id",
        "staging_keys",
        "prefix_token_count",
        "prefix_digest",
        "effective_output_limit",
        "terminal_finish_reason",
        "terminal_stop_reason",
        "extra",
      ),
      fc.constantFrom<unknown>(
        undefined,
        null,
        "",
        "x",
        "stop",
        "length",
        "terminal_completion",
        0,
        1,
        -1,
        1.5,
        2 ** 53,
        [],
        ["k"],
        ["k", "k"],
        [""],
        [1],
        hex("ab"),
        "CD",
        true,
      ),
    );
    const ackArb = fc
      .tuple(
        fc.constantFrom<Record<string, unknown>>(durable, failure),
        fc.array(change, { maxLength: 2 }),
      )
      .map(([base, changes]) => {
        const ack: Record<string, unknown> = { ...base };
        for (const [key, value] of changes) {
          if (value === undefined) delete ack[key];
          else ack[key] = value;
        }
        return ack;
      });
    const outcome = (parse: () => unknown) => {
      try {
        return JSON.stringify(parse());
      } catch {
        return "refused";
      }
    };
    fc.assert(
      fc.property(fc.array(ackArb, { maxLength: 3 }), (acks) => {
        const inv = inventory();
        const wire = {
          checkpoint_id: inv.checkpoint_id,
          cut_id: "cut-1",
          inventory_digest: inv.inventory_digest,
          inventory: inv,
          backend_snapshot_id: "snap-1",
          prefixes: acks,
        };
        expect(outcome(() => parseGenerationCutReceipt(wire))).toBe(
          outcome(() => GenerationCutReceiptReplySchema.parse(wire)),
        );
      }),
      { numRuns: 4000 },
    );
  });
});

describe("validateReceiptFor", () => {
  it("accepts an exact, complete answer in any ack order", () => {
    const inv = inventory();
    expect(() => validateReceiptFor(receipt(inv), inv)).not.toThrow();
    const reversed = receipt(inv, { prefixes: [generationCutFailureAck(t2), ack(t10)] });
    expect(() => validateReceiptFor(reversed, inv)).not.toThrow();
  });

  it("refuses a receipt echoing another inventory", () => {
    const inv = inventory();
    const other = buildGenerationCutInventory({
      checkpoint_id: "ckpt-1",
      server_name: "policé",
      active_prefixes: [t10, { ...t2, admitted_at: 1700000001 }],
    });
    expectReason(() => validateReceiptFor(receipt(other), inv), "receipt_inventory_mismatch");
  });

  it("refuses an echoed inventory that differs from the one sent, even with the same digest", () => {
    const inv = inventory();
    const tampered = { ...inv, server_name: "other" };
    expectReason(
      () => validateReceiptFor(receipt(inv, { inventory: tampered }), inv),
      "receipt_inventory_mismatch",
    );
  });

  it("refuses a receipt whose own inventory_digest differs", () => {
    const inv = inventory();
    expectReason(
      () => validateReceiptFor(receipt(inv, { inventory_digest: hex("00") }), inv),
      "receipt_inventory_mismatch",
    );
  });

  it.each<[string, (inv: GenerationCutInventory) => Partial<GenerationCutReceipt>]>([
    ["a duplicate ack", () => ({ prefixes: [ack(t10), ack(t10), generationCutFailureAck(t2)] })],
    ["a missing ack", () => ({ prefixes: [ack(t10)] })],
    [
      "an extra ack",
      () => ({
        prefixes: [
          ack(t10),
          generationCutFailureAck(t2),
          generationCutFailureAck({ ...t2, ticket_id: "t3" }),
        ],
      }),
    ],
    [
      "an ack of an unknown ticket instead of a known one",
      () => ({ prefixes: [ack(t10), generationCutFailureAck({ ...t2, ticket_id: "t3" })] }),
    ],
  ])("refuses %s", (_name, overrides) => {
    const inv = inventory();
    expectReason(
      () => validateReceiptFor(receipt(inv, overrides(inv)), inv),
      "receipt_coverage_mismatch",
    );
  });

  it.each<[string, Partial<GenerationCutPrefix>]>([
    ["rollout_id", { rollout_id: "q" }],
    ["attempt", { attempt: 2 }],
    ["model_call_id", { model_call_id: "c9" }],
    ["admitted_at", { admitted_at: 1700000000.5 }],
  ])("refuses an ack whose %s differs from its ticket's", (_field, change) => {
    const inv = inventory();
    const prefixes = [ack(t10), generationCutFailureAck({ ...t2, ...change })];
    expectReason(
      () => validateReceiptFor(receipt(inv, { prefixes }), inv),
      "receipt_identity_mismatch",
    );
  });

  it("the receipt refuses unknown fields", () => {
    const inv = inventory();
    const wire = JSON.parse(JSON.stringify(receipt(inv)));
    expect(GenerationCutReceiptSchema.safeParse({ ...wire, note: 1 }).success).toBe(false);
  });
});

describe("generationCutInventoryFromWire", () => {
  const prefix = fc.record(
    {
      ticket_id: mostly(fc.constantFrom("t1", "t2")),
      rollout_id: mostly(fc.constantFrom("r", "task-3"), fc.constantFrom(".r", "a b")),
      attempt: mostly(fc.nat(3), fc.constant(-1)),
      model_call_id: mostly(fc.constant("c1")),
      admitted_at: mostly(fc.double({ noNaN: true, noDefaultInfinity: true })),
    },
    { requiredKeys: [] },
  );
  const inventory = fc.record(
    {
      checkpoint_id: mostly(fc.constant("ckpt-1")),
      server_name: mostly(fc.constant("policy")),
      active_prefixes: mostly(fc.array(prefix, { maxLength: 4 })),
      inventory_digest: mostly(fc.constant("ab".repeat(32)), fc.constant("AB".repeat(32))),
    },
    { requiredKeys: [] },
  );

  /** Bodies as they arrive, sometimes with a key the schema refuses. */
  const bodies = fc.tuple(inventory, fc.boolean()).map(([raw, extraKey]) => {
    const value = throughJson(raw) as Record<string, unknown>;
    if (extraKey) value.surprise = 1;
    return value;
  });

  it("answers what GenerationCutInventorySchema answers, or null where the schema refuses", () => {
    expectAgreesWithSchema({
      values: bodies,
      fast: generationCutInventoryFromWire,
      slow: (value) => GenerationCutInventorySchema.safeParse(value),
      takesEveryValid: true,
    });
  });
});
