import { describe, expect, it } from "vitest";
import { outputText } from "#sdk/protocol.js";

describe("outputText", () => {
  it("joins the output_text parts of every output message in order", () => {
    const reply = {
      object: "response",
      output: [
        { type: "reasoning", content: [{ type: "reasoning_text", text: "thinking" }] },
        { type: "message", content: [{ type: "output_text", text: "4" }] },
        { type: "function_call", name: "add", arguments: "{}" },
        {
          type: "message",
          content: [
            { type: "refusal", refusal: "no" },
            { type: "output_text", text: "2" },
          ],
        },
      ],
    };
    expect(outputText(reply)).toBe("42");
  });

  it("reads nothing from values that are no reply, without throwing", () => {
    for (const value of [
      null,
      undefined,
      7,
      "text",
      [],
      {},
      { output: "x" },
      { output: [null, 3] },
    ]) {
      expect(outputText(value)).toBe("");
    }
    expect(outputText({ output: [{ content: [{ type: "output_text", text: 5 }] }] })).toBe("");
  });

  it("ignores inherited fields, so a polluted prototype cannot inject text", () => {
    const part = Object.create({ type: "output_text", text: "injected" }) as object;
    expect(outputText({ output: [{ content: [part] }] })).toBe("");
  });
});
