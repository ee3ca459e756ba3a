import { afterEach, describe, expect, it, vi } from "vitest";
import {
  MAX_JSON_DEPTH,
  NotJsonError,
  assertJsonValue,
  encodeJson,
  type JsonValue,
} from "#sdk/json/json-value.js";
import { frozenJson } from "#sdk/json/frozen-json.js";
import { CheckpointStateError } from "#sdk/errors.js";
import { fromCaptureKey } from "#sdk/identity/episode-id.js";
import { encodeRecordLine } from "#sdk/store/records-writer.js";
import { objectsWalked } from "../../support/objects-walked.js";

/** A conversation-like value: many small objects, as agent sessions and boundaries are. */
function conversation(turns: number): JsonValue {
  return {
    outputs: Array.from({ length: turns }, (_, i) => ({
      type: "message",
      role: "assistant",
      content: [{ type: "output_text", text: `answer ${i}`, annotations: [] }],
    })),
    usage: { input_tokens: 12, output_tokens: 34 },
  };
}

function record(key: string, boundary: unknown) {
  return { episode_id: fromCaptureKey(key), boundary } as never;
}

afterEach(() => {
  vi.restoreAllMocks();
});

describe("frozenJson", () => {
  it("returns a deep-frozen copy equal to the value, leaving the value as it was", () => {
    const value = conversation(3) as { outputs: { content: unknown[] }[] };
    const copy = frozenJson(value);
    expect(copy).toEqual(value);
    expect(copy).not.toBe(value);
    expect(Object.isFrozen(copy)).toBe(true);
    expect(Object.isFrozen(copy.outputs)).toBe(true);
    expect(Object.isFrozen(copy.outputs[2]?.content[0])).toBe(true);
    expect(Object.isFrozen(value)).toBe(false);
    expect(Object.isFrozen(value.outputs[0])).toBe(false);
    expect(() => {
      (copy.outputs as unknown[]).push({});
    }).toThrow(TypeError);
  });

  it("is written by the records writer without a validation walk", () => {
    const plain = conversation(20);
    const trusted = frozenJson(conversation(20));
    const baseline = objectsWalked(() => encodeRecordLine(record("r", null)));
    // The same tree, untrusted, is walked object by object; the frozen copy not at all.
    expect(objectsWalked(() => encodeRecordLine(record("r", plain)))).toBeGreaterThan(
      baseline + 40,
    );
    expect(objectsWalked(() => encodeRecordLine(record("r", trusted)))).toBe(baseline);
    expect(encodeRecordLine(record("r", trusted))).toBe(encodeRecordLine(record("r", plain)));
  });

  it("copies only what is not frozen already: frozen parts are reused as they are", () => {
    const turn = frozenJson({ turn: 1, answer: [{ type: "message", text: "hi" }] });
    const bundle = frozenJson({ records: [turn], gaps: [] });
    expect(bundle.records[0]).toBe(turn);
    // A trusted part placed in an author's object is not walked either.
    const authors = { step: 3, turns: [turn, turn, turn] };
    const walked = objectsWalked(() => encodeJson(authors));
    expect(walked).toBe(1);
    expect(encodeJson(authors)).toBe(JSON.stringify(authors));
  });

  it("keeps the author's later mutations of the original out of the copy", () => {
    const original: Record<string, unknown> = { answer: { text: "kept" }, n: 1 };
    const copy = frozenJson(original);
    (original.answer as Record<string, unknown>).text = new Date(0);
    original.n = Number.NaN;
    expect(encodeRecordLine(record("r", copy))).toBe(
      '{"episode_id":{"rollout_id":"r","attempt":0},"boundary":{"answer":{"text":"kept"},"n":1}}\n',
    );
    // The original is the author's: still checked, and refused naming the episode and the path.
    let refused: unknown;
    try {
      encodeRecordLine(record("r-a2", original));
    } catch (error) {
      refused = error;
    }
    expect(refused).toBeInstanceOf(CheckpointStateError);
    expect((refused as CheckpointStateError).captureKey).toBe("r-a2");
    expect((refused as CheckpointStateError).detail).toMatch(
      /episode 'r-a2' is not JSON: \$\.boundary\.answer\.text: a Date is not JSON/,
    );
  });

  it("never trusts a tree that needs the extended serializer", () => {
    const copy = frozenJson({ a: [Number.NaN, -0, 2n ** 64n] });
    expect(Object.isFrozen(copy.a)).toBe(true);
    // Trusted, it would go to JSON.stringify, which writes NaN as null and throws on bigints.
    expect(encodeJson({ wrapped: copy })).toBe('{"wrapped":{"a":[NaN,-0,18446744073709551616]}}');
  });

  it("refuses what is not JSON with NotJsonError naming the path, and copies nothing", () => {
    expect(() => frozenJson({ a: [1, { when: new Date(0) }] })).toThrow(
      expect.objectContaining({ name: "NotJsonError", path: "$.a[1].when" }),
    );
    const cycle: Record<string, unknown> = { a: {} };
    (cycle.a as Record<string, unknown>).back = cycle;
    expect(() => frozenJson(cycle)).toThrow(/circular reference/);
    const holey: unknown[] = [1];
    holey[2] = 3;
    expect(() => frozenJson(holey)).toThrow(NotJsonError);
    expect(() => frozenJson({ n: 3n })).toThrow(/safe integer range/);
  });

  it("reads a getter once, into a data property the commit can trust", () => {
    let reads = 0;
    const value = {
      get n() {
        reads += 1;
        return reads;
      },
    };
    const copy = frozenJson(value);
    expect(copy).toEqual({ n: 1 });
    expect(Object.getOwnPropertyDescriptor(copy, "n")).toMatchObject({ value: 1, writable: false });
    expect(encodeJson(copy)).toBe('{"n":1}');
    expect(reads).toBe(1);
  });

  it("keeps the depth bound: a trusted tree nested too deep is refused where it crosses it", () => {
    let deep: JsonValue = [];
    for (let i = 1; i < 600; i++) deep = [deep];
    const trusted = frozenJson(deep);
    let outer: JsonValue = trusted;
    for (let i = 0; i < 500; i++) outer = [outer];
    expect(() => assertJsonValue(outer)).toThrow(/nested deeper than 1000 levels/);
    let fits: JsonValue = trusted;
    for (let i = 0; i < MAX_JSON_DEPTH - 600; i++) fits = [fits];
    expect(() => assertJsonValue(fits)).not.toThrow();
    expect(() => frozenJson(outer)).toThrow(/nested deeper than 1000 levels/);
  });

  it("returns scalars as they are", () => {
    expect(frozenJson("text")).toBe("text");
    expect(frozenJson(null)).toBe(null);
    expect(frozenJson(-0)).toBe(-0);
  });
});
