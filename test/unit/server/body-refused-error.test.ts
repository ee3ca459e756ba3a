import { describe, expect, it } from "vitest";
import { GymError, InvalidRequestError } from "#sdk/errors.js";
import { BodyRefusedError } from "#sdk/server/json-body.js";

describe("BodyRefusedError", () => {
  const made: [string, BodyRefusedError, number][] = [
    ["tooLarge", BodyRefusedError.tooLarge(10, "declared"), 413],
    ["tooLarge (inflated)", BodyRefusedError.tooLarge(10, "inflated"), 413],
    ["unsupportedEncoding", BodyRefusedError.unsupportedEncoding("compress"), 415],
    ["unsupportedCharset", BodyRefusedError.unsupportedCharset("latin1"), 415],
    ["badEncoding", BodyRefusedError.badEncoding("gzip", new Error("incorrect header check")), 400],
    ["tooDeep", BodyRefusedError.tooDeep(512), 422],
    ["notJson", BodyRefusedError.notJson(new SyntaxError("Unexpected end")), 422],
  ];

  it.each(made)("%s returns its own class, invalid_request with its status", (_, error, status) => {
    expect(error).toBeInstanceOf(BodyRefusedError);
    expect(error).toBeInstanceOf(InvalidRequestError);
    expect(error).toBeInstanceOf(GymError);
    expect(error.name).toBe("BodyRefusedError");
    expect(error.code).toBe("invalid_request");
    expect(error.status).toBe(status);
    const envelope = error.toEnvelope();
    expect(envelope.error.code).toBe("invalid_request");
    expect(envelope.error.detail).toBe(error.message);
  });

  it("keeps the cause of a decoding or parsing failure", () => {
    const cause = new Error("incorrect header check");
    expect(BodyRefusedError.badEncoding("gzip", cause).cause).toBe(cause);
  });
});
