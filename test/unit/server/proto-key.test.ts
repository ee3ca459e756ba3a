import { describe, expect, it } from "vitest";
import { mayHoldProtoKey, protoKeyPath } from "#sdk/server/proto-key.js";

describe("protoKeyPath", () => {
  it("finds an own __proto__ key at any depth, literal or escaped", () => {
    expect(protoKeyPath(JSON.parse('{"__proto__":{"x":1}}'))).toEqual(["__proto__"]);
    const nested = '{"a":[1,{"b":{"\\u005f_proto__":null}}]}';
    expect(mayHoldProtoKey(nested)).toBe(true);
    expect(protoKeyPath(JSON.parse(nested))).toEqual(["a", 1, "b", "__proto__"]);
  });

  it("passes keys named like other Object.prototype members and __proto__ as a value", () => {
    const text = '{"constructor":1,"hasOwnProperty":{"toString":2},"id":"__proto__"}';
    expect(protoKeyPath(JSON.parse(text))).toBeNull();
    expect(mayHoldProtoKey('{"a":"plain"}')).toBe(false);
  });

  it("walks a value as deep as JSON allows without exhausting the stack", () => {
    const deep = "[".repeat(20_000) + '{"__proto__":0}' + "]".repeat(20_000);
    expect(protoKeyPath(JSON.parse(deep))).toHaveLength(20_001);
  });
});
