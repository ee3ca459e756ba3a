/**
 * Fingerprints v3. Known answers are hashed here field by field (tag byte, u64
 * big-endian length, UTF-8), so a wrong tag, order or length encoding fails.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import {
  FINGERPRINT_VERSION,
  assistantFingerprint,
  canonicalizeToolArguments,
  conversationDigest,
} from "#sdk/capture/fingerprints.js";
import { Bytes, expectReason } from "./helpers.js";

/** The hash of `domain` then each `[tag, value]` field. */
function fields(domain: string, ...entries: [number, string][]): string {
  const b = new Bytes().ascii(domain);
  for (const [tag, value] of entries) b.u8(tag).text(value);
  return b.sha256();
}
const context = (...entries: [number, string][]) => fields("nemo-gym-lineage-context", ...entries);
const assistant = (...entries: [number, string][]) => fields("nemo-gym-lineage", ...entries);

describe("conversationDigest", () => {
  it("is the bare domain hash for no items", () => {
    expect(conversationDigest([])).toBe(context());
    expect(conversationDigest(null)).toBe(context());
  });

  it("hashes role, then content parts as type and payload", () => {
    expect(
      conversationDigest([
        { role: "user", content: "hi" },
        { role: "assistant", content: [{ type: "output_text", text: "yo" }, "", { text: "" }] },
      ]),
    ).toBe(context([0, "user"], [1, "text"], [2, "hi"], [0, "assistant"], [1, "text"], [2, "yo"]));
  });

  it("counts system and developer items by position only", () => {
    const digest = (system: string) =>
      conversationDigest([
        { role: "system", content: system },
        { role: "developer", content: [{ type: "input_text", text: system }] },
        { role: "user", content: "q" },
      ]);
    expect(digest("today is Monday")).toBe(digest("today is Tuesday"));
    expect(digest("x")).toBe(
      context([0, "system"], [0, "developer"], [0, "user"], [1, "text"], [2, "q"]),
    );
  });

  it("falls back to the item type, then the empty string, for the role", () => {
    expect(conversationDigest([{ type: "reasoning", summary: [] }, {}])).toBe(
      context([0, "reasoning"], [0, ""]),
    );
  });

  it("hashes tool calls and tool results", () => {
    expect(
      conversationDigest([
        {
          role: "assistant",
          content: null,
          tool_calls: [{ id: "c1", function: { name: "f", arguments: '{"b": 1, "a": 2}' } }],
        },
        { role: "tool", tool_call_id: "c1", content: "sunny" },
        { type: "function_call_output", call_id: "c2", output: { z: 1, a: [true] } },
        { role: "user", content: [{ type: "tool_result", tool_use_id: "t1", content: "4" }] },
      ]),
    ).toBe(
      context(
        [0, "assistant"],
        [3, "c1"],
        [4, "f"],
        [5, '{"a":2,"b":1}'],
        [0, "tool"],
        [1, "text"],
        [2, "sunny"],
        [6, "c1"],
        [7, "sunny"],
        [0, "function_call_output"],
        [6, "c2"],
        [7, '{"a":[true],"z":1}'],
        [0, "user"],
        [6, "t1"],
        [7, "4"],
      ),
    );
  });

  it("hashes a non-text block as its type and canonical JSON", () => {
    const image = { type: "input_image", image_url: "http://x/é.png", detail: "auto" };
    expect(conversationDigest([{ role: "user", content: [image] }])).toBe(
      context(
        [0, "user"],
        [1, "input_image"],
        [2, '{"detail":"auto","image_url":"http://x/é.png","type":"input_image"}'],
      ),
    );
  });
});

describe("assistantFingerprint", () => {
  it("is empty when no item is model-authored", () => {
    expect(assistantFingerprint([{ role: "user", content: "hi" }])).toBe("");
    expect(assistantFingerprint([])).toBe("");
  });

  it("hashes only model-authored items, with their own tags", () => {
    expect(
      assistantFingerprint([
        { role: "user", content: "ignored" },
        {
          role: "assistant",
          content: "ok",
          tool_calls: [{ id: "c1", function: { name: "f", arguments: '{"b": 1.0, "a": 2}' } }],
        },
        { type: "reasoning", summary: [{ type: "summary_text", text: "hm" }] },
      ]),
    ).toBe(assistant([0, "text"], [1, "ok"], [2, "c1"], [3, "f"], [4, '{"a":2,"b":1.0}']));
  });

  it("normalizes a tool call the same way in the Chat, Responses and Anthropic dialects", () => {
    const chat = [
      {
        role: "assistant",
        content: null,
        tool_calls: [{ id: "call_1", function: { name: "get", arguments: '{"city": "SF"}' } }],
      },
    ];
    const responses = [
      { type: "function_call", call_id: "call_1", name: "get", arguments: '{ "city":"SF" }' },
    ];
    const anthropic = [
      {
        role: "assistant",
        content: [{ type: "tool_use", id: "call_1", name: "get", input: { city: "SF" } }],
      },
    ];
    const expected = assistant([2, "call_1"], [3, "get"], [4, '{"city":"SF"}']);
    expect(assistantFingerprint(chat)).toBe(expected);
    expect(assistantFingerprint(responses)).toBe(expected);
    expect(assistantFingerprint(anthropic)).toBe(expected);
  });

  it("prefixes a Responses tool name with its namespace and falls back to id", () => {
    expect(
      assistantFingerprint([{ type: "function_call", id: "fc", namespace: "web", name: "search" }]),
    ).toBe(assistant([2, "fc"], [3, "web__search"], [4, ""]));
  });

  it("reads missing and null fields as Python's dict reads do", () => {
    // `str(call.get("id") or "")` is "" for null; `str(function.get("name", ""))` is "None".
    expect(
      assistantFingerprint([
        {
          role: "assistant",
          tool_calls: [{ id: null, function: { name: null, arguments: null } }, null],
        },
      ]),
    ).toBe(assistant([2, ""], [3, "None"], [4, ""], [2, ""], [3, ""], [4, ""]));
  });
});

const argumentValue = fc.letrec((tie) => ({
  node: fc.oneof(
    { depthSize: "small" },
    fc.constant(null),
    fc.boolean(),
    fc.integer(),
    fc.double({ min: -1e15, max: 1e15, noNaN: true }),
    fc.string(),
    fc.array(tie("node"), { maxLength: 3 }),
    fc.dictionary(fc.string(), tie("node"), { maxKeys: 3 }),
  ),
})).node;

describe("canonicalizeToolArguments", () => {
  it("re-serializes JSON arguments with sorted keys and no spaces, keeping float types", () => {
    expect(canonicalizeToolArguments('{ "b": [1.0, 1e-7], "a": {"y": 2, "x": 1} }')).toBe(
      '{"a":{"x":1,"y":2},"b":[1.0,1e-7]}',
    );
  });

  it("strips text that is not JSON, with Python's whitespace set", () => {
    expect(canonicalizeToolArguments("  not json \n")).toBe("not json");
    expect(canonicalizeToolArguments("\x1cnot json\x1f")).toBe("not json");
    expect(canonicalizeToolArguments("\ufeffnot json")).toBe("\ufeffnot json");
  });

  it("reads null as the empty string and serializes other values canonically", () => {
    expect(canonicalizeToolArguments(null)).toBe("");
    expect(canonicalizeToolArguments({ b: 1, a: [null] })).toBe('{"a":[null],"b":1}');
  });

  it("gives the same result however a harness re-serializes the arguments", () => {
    fc.assert(
      // Integer literals beyond 64 bits are refused by orjson; keep the values in range.
      fc.property(fc.dictionary(fc.string(), argumentValue), (args) => {
        const spaced = JSON.stringify(args, null, 2);
        expect(canonicalizeToolArguments(spaced)).toBe(
          canonicalizeToolArguments(JSON.stringify(args)),
        );
      }),
    );
  });
});

describe("fingerprint input errors", () => {
  it.each<[string, unknown[]]>([
    ["an item that is not an object", ["text"]],
    ["content that is neither text nor a list", [{ role: "user", content: 5 }]],
    ["a content block that is neither text nor an object", [{ role: "user", content: [5] }]],
    ["an untyped block without text", [{ role: "user", content: [{ foo: "bar" }] }]],
    ["tool_calls that are not a list", [{ role: "assistant", tool_calls: { a: 1 } }]],
    ["a tool call that is not an object", [{ role: "assistant", tool_calls: ["x"] }]],
    ["a role that is an object", [{ role: { a: 1 }, content: "x" }]],
    [
      "arguments holding an integer beyond 64 bits",
      [{ type: "function_call", name: "f", arguments: '{"n": 123456789012345678901234567890}' }],
    ],
  ])("refuses %s", (_name, items) => {
    expectReason(() => conversationDigest(items), "invalid_fingerprint_input");
  });
});

describe("cross-language vectors", () => {
  // Computed with the Python reference's fingerprint functions (Python 3.11, orjson 3.8.3).
  it("match the Python reference", () => {
    const chat = [
      { role: "system", content: "today is monday" },
      { role: "user", content: "hi" },
      {
        role: "assistant",
        content: "hello",
        tool_calls: [
          {
            id: "c1",
            type: "function",
            function: {
              name: "get",
              arguments: '{ "b": 1.0, "a": [1, 2.5, 1e-5, 10000000000000000] }',
            },
          },
        ],
      },
      { role: "tool", tool_call_id: "c1", content: "sunny" },
    ];
    expect(assistantFingerprint(chat)).toBe(
      "4e68a2c680d72003af565134fcaec8e996ea9559eedee6d46531b4eecc6072eb",
    );
    expect(conversationDigest(chat)).toBe(
      "3d47b3453c2ebfc501cd74081e552f532d41fdb794b833eedd3c7070523be27a",
    );
    const anthropic = [
      {
        role: "user",
        content: [
          { type: "text", text: "look" },
          { type: "image", source: { type: "base64", data: "AAA" } },
        ],
      },
      {
        role: "assistant",
        content: [
          { type: "text", text: "calling" },
          { type: "tool_use", id: "tu1", name: "calc", input: { x: 2, y: [1, 2] } },
        ],
      },
      {
        role: "user",
        content: [
          { type: "tool_result", tool_use_id: "tu1", content: [{ type: "text", text: "4" }] },
        ],
      },
    ];
    expect(assistantFingerprint(anthropic)).toBe(
      "de15281a5e257d60e2549ff3b004c70b1e9b893b578416fdf793593c683892ab",
    );
    expect(conversationDigest(anthropic)).toBe(
      "a433fb779026d0a446304bdac0ecd2d00ead31259aa5f8428b865cf12b444978",
    );
  });

  it("are version 3", () => {
    expect(FINGERPRINT_VERSION).toBe(3);
  });
});
