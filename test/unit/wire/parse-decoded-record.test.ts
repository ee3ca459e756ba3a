/**
 * `parseDecodedRecord` is a record schema's parse made fast for records `decodeJson` produced:
 * for any decoded record it answers what the schema answers (same data, same key order), or
 * null wherever the schema refuses (the reader then asks the schema, which names the problem).
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { episodeIdFromWire } from "#sdk/identity/episode-id.js";
import { AgentSessionRecordSchema } from "#sdk/participants/agent/agent-records.js";
import { EnvironmentRecordSchema } from "#sdk/participants/environment/environment-participant.js";
import { ModelRecordSchema } from "#sdk/participants/model/policy-participant.js";
import { ResourcesRecordSchema } from "#sdk/participants/resources/resources-participant.js";
import { decodeJson } from "#sdk/json/json-decode.js";
import { withDecodedPayloadsTrusted } from "#sdk/json/json-payload-schema.js";
import { parseDecodedRecord, recordSchema, type RecordBase } from "#sdk/wire/storage.js";
import { z } from "zod";
import { expectAgreesWithSchema, mostly } from "../../support/fast-path.js";

const payload = fc.oneof(
  fc.constant(null),
  fc.jsonValue({ maxDepth: 3 }),
  fc.constant({ turns: [{ n: 1 }], cookies: {} }),
);
/** A field value: usually of the right type, sometimes of a wrong one, sometimes missing. */
const fieldValue = (right: fc.Arbitrary<unknown>) => mostly(right, undefined, 6);
const hex = fc.stringMatching(/^[0-9a-f]{64}$/);
const episode = fc.record({ rollout_id: fc.constantFrom("r", "task-3"), attempt: fc.nat(3) });

/** A stored generation-cut record, as a policy model writes it. */
const CUT = {
  model_call_id: "c1",
  request_digest: "d".repeat(64),
  continuation: {
    schema_version: 2,
    source_capture_key: "r",
    source_model_call_id: "c1",
    staging_keys: ["__generation_cut__/r/c1"],
    prefix_token_count: 3,
    prefix_digest: "a".repeat(64),
    effective_output_limit: 64,
    terminal_finish_reason: null,
    terminal_stop_reason: null,
  },
};

const CASES: [string, z.ZodType<RecordBase>, Record<string, fc.Arbitrary<unknown>>][] = [
  [
    "agent",
    AgentSessionRecordSchema,
    {
      session_key: fc.constantFrom("agent-session-1", "run:r", ""),
      session: payload,
      boundary: payload,
      episode: payload,
      owner: fc.option(fc.string()),
    },
  ],
  ["environment", EnvironmentRecordSchema, { task_digest: hex, boundary: payload }],
  [
    "resources",
    ResourcesRecordSchema,
    { session_id: fc.string(), state: payload, owner: fc.option(fc.string()) },
  ],
  [
    "model",
    ModelRecordSchema,
    {
      rows: fc.array(fc.constantFrom<unknown>({ a: 1 }, {}, { a: 1 }, 3), { maxLength: 3 }),
      generation_cuts: fc.constantFrom<unknown>([], [CUT], [CUT, CUT], [{ ...CUT, extra: 1 }], [7]),
    },
  ],
  [
    "author-defined",
    recordSchema({
      // Schemas that take undefined: only the object knows a key may not be missing.
      anything: z.custom<unknown>(() => true),
      filled: z.unknown().transform((v) => v ?? "default"),
      maybe: z.string().optional(),
      counted: z.number().int().default(0),
    }),
    {
      anything: fc.constantFrom<unknown>(1, "a"),
      filled: fc.constantFrom<unknown>("x", 2),
      maybe: fc.string(),
      counted: fc.nat(),
    },
  ],
];

/** A stored record as text: the fields, in a shuffled order, sometimes with an extra key. */
function recordText(fields: Record<string, fc.Arbitrary<unknown>>): fc.Arbitrary<string> {
  const entries = Object.entries(fields).map(([key, arb]) =>
    fieldValue(arb).map((value) => [key, value] as const),
  );
  return fc
    .tuple(episode, fc.tuple(...entries), fc.boolean(), fc.boolean())
    .map(([id, pairs, extra, reversed]) => {
      const present = pairs.filter(([, value]) => value !== undefined);
      const ordered = reversed ? [...present].reverse() : present;
      const record: Record<string, unknown> = { episode_id: id, ...Object.fromEntries(ordered) };
      if (extra) record.unexpected = 1;
      return JSON.stringify(record);
    });
}

describe("parseDecodedRecord", () => {
  for (const [name, schema, fields] of CASES) {
    it(`answers what the ${name} record schema answers, or null where it refuses`, () => {
      expectAgreesWithSchema({
        values: recordText(fields).map((text) => decodeJson(text) as Record<string, unknown>),
        fast: (value) => {
          const id = episodeIdFromWire(value.episode_id);
          expect(id).not.toBeNull();
          return parseDecodedRecord(schema, value, id as RecordBase["episode_id"]);
        },
        slow: (value) => withDecodedPayloadsTrusted(() => schema.safeParse(value)),
        numRuns: 300,
      });
    });
  }

  it("takes a valid agent record without the schema", () => {
    const agent = decodeJson(
      JSON.stringify({
        episode_id: { rollout_id: "r", attempt: 1 },
        session_key: "agent-session-1",
        session: { turns: [] },
        boundary: null,
        episode: null,
        owner: null,
      }),
    ) as Record<string, unknown>;
    const id = episodeIdFromWire(agent.episode_id) as RecordBase["episode_id"];
    expect(parseDecodedRecord(AgentSessionRecordSchema, agent, id)).toEqual({ ...agent });
  });

  it("leaves a schema not built by recordSchema to that schema", () => {
    const plain = z.strictObject({ episode_id: z.unknown() }) as unknown as z.ZodType<RecordBase>;
    const value = { episode_id: { rollout_id: "r", attempt: 0 } };
    const id = episodeIdFromWire(value.episode_id) as RecordBase["episode_id"];
    expect(parseDecodedRecord(plain, value, id)).toBeNull();
    expect(parseDecodedRecord(recordSchema({}), value, id)).toEqual(value);
  });
});
