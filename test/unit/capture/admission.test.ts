/** CaptureAdmission: the token_in and text rules, strict types. */
import { describe, expect, it } from "vitest";
import { CaptureAdmissionSchema } from "#sdk/capture/admission.js";
import { childAdmission, hex, textAdmission } from "./helpers.js";

const continuation = {
  source_capture_key: "r",
  source_model_call_id: "c1",
  staging_keys: ["__generation_cut__/r/c1"],
  prefix_token_count: 2,
  prefix_digest: hex("cd"),
  effective_output_limit: 16,
};

function refusal(value: unknown): string | null {
  const result = CaptureAdmissionSchema.safeParse(value);
  return result.success ? null : result.error.issues.map((issue) => issue.message).join("; ");
}

describe("CaptureAdmissionSchema", () => {
  it("accepts a text root and fills the defaults", () => {
    expect(CaptureAdmissionSchema.parse(textAdmission())).toEqual({
      schema_version: 2,
      rollout_id: "r",
      model_call_id: "c1",
      parent_call_id: null,
      prev_len: 0,
      mode: "text",
      required_prefix_token_ids: [],
      staging_chain: [],
      parent_chain_hash: null,
      generation_cut: null,
    });
  });

  it("accepts a token_in call with its prefix inline", () => {
    expect(refusal(childAdmission())).toBeNull();
  });

  it("accepts a token_in call whose prefix is a staging chain, with no inline IDs", () => {
    expect(
      refusal(childAdmission({ required_prefix_token_ids: [], staging_chain: ["r/c0"] })),
    ).toBeNull();
  });

  it("accepts a continuation in either mode", () => {
    expect(refusal(textAdmission({ generation_cut: continuation }))).toBeNull();
    expect(refusal(childAdmission({ generation_cut: continuation }))).toBeNull();
  });

  it.each<[string, Record<string, unknown>, string]>([
    [
      "negative prefix IDs",
      childAdmission({ required_prefix_token_ids: [1, -2, 3] }),
      "must be non-negative",
    ],
    [
      "token_in without a parent",
      childAdmission({ parent_call_id: null }),
      "requires a parent_call_id and prev_len > 0",
    ],
    [
      "token_in with prev_len 0",
      childAdmission({ prev_len: 0, required_prefix_token_ids: [] }),
      "requires a parent_call_id and prev_len > 0",
    ],
    [
      "token_in without the parent's chain hash",
      childAdmission({ parent_chain_hash: null }),
      "requires the parent's chain hash",
    ],
    [
      "token_in with too few inline IDs and no staging chain",
      childAdmission({ required_prefix_token_ids: [1, 2] }),
      "length must equal prev_len",
    ],
    ["text with a parent", textAdmission({ parent_call_id: "c0" }), "parentless root"],
    ["text with prev_len > 0", textAdmission({ prev_len: 2 }), "parentless root"],
    ["text with prefix IDs", textAdmission({ required_prefix_token_ids: [1] }), "parentless root"],
    ["text with a staging chain", textAdmission({ staging_chain: ["r/c0"] }), "parentless root"],
    [
      "text with a parent chain hash",
      textAdmission({ parent_chain_hash: hex("ab") }),
      "parentless root",
    ],
  ])("refuses %s", (_name, value, message) => {
    expect(refusal(value)).toContain(message);
  });

  it.each<[string, Record<string, unknown>]>([
    ["an unknown field", { ...textAdmission(), extra: 1 }],
    ["schema version 1", textAdmission({ schema_version: 1 as never })],
    ["an empty rollout ID", textAdmission({ rollout_id: "" })],
    ["an unknown mode", textAdmission({ mode: "tokens" as never })],
    ["prev_len as a string", childAdmission({ prev_len: "3" as never })],
    ["a fractional prefix ID", childAdmission({ required_prefix_token_ids: [1, 2.5, 3] })],
    ["prev_len NaN", childAdmission({ prev_len: NaN })],
    ["an uppercase chain hash", childAdmission({ parent_chain_hash: hex("AB") })],
    [
      "an invalid continuation",
      textAdmission({ generation_cut: { ...continuation, staging_keys: [] } }),
    ],
  ])("refuses %s (strict types)", (_name, value) => {
    expect(refusal(value)).not.toBeNull();
  });
});
