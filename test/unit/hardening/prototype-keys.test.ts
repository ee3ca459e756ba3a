/**
 * Names chosen by others (server names in a deployment, usage fields of a model's reply) are
 * own keys: `constructor` or `toString` is not found on `Object.prototype`, and `__proto__`
 * (which `JSON.parse` keeps as an own key) is kept rather than turned into a prototype.
 */
import { describe, expect, it } from "vitest";
import { addUsage } from "../../../reference-servers/simple-agent/src/turn-loop.js";
import { UnknownServerError } from "#sdk/client/errors.js";
import { ServerClient } from "#sdk/client/server-client.js";

describe("ServerClient.server", () => {
  it("knows only the servers the deployment names", async () => {
    const policy = {
      kind: "model",
      url: "http://127.0.0.1:9",
      host: "127.0.0.1",
      port: 9,
      num_workers: 1,
      config: {},
    } as const;
    const client = new ServerClient({ checkpoint: null, servers: { policy } });
    expect(client.server("policy")).toBe(policy);
    for (const name of ["constructor", "toString", "hasOwnProperty", "__proto__"]) {
      expect(() => client.server(name), name).toThrow(UnknownServerError);
    }
    await client.close();
  });
});

describe("the Simple Agent's usage sums", () => {
  it("sum fields named like Object.prototype members as any other", () => {
    const first = JSON.parse(
      '{"input_tokens": 3, "constructor": 1, "toString": "x", "__proto__": {"cached": 2}}',
    ) as unknown;
    const second = JSON.parse('{"input_tokens": 4, "constructor": 2, "__proto__": {"cached": 5}}');
    const sum = addUsage(addUsage(null, first), second) as Record<string, unknown>;
    expect(Object.getPrototypeOf(sum)).toBe(Object.prototype);
    expect(Object.keys(sum).sort()).toEqual([
      "__proto__",
      "constructor",
      "input_tokens",
      "toString",
    ]);
    expect(sum.input_tokens).toBe(7);
    expect(sum.constructor).toBe(3);
    expect(sum.toString).toBe("x");
    expect(Object.getOwnPropertyDescriptor(sum, "__proto__")?.value).toEqual({ cached: 7 });
  });
});

describe("cookies named like Object.prototype members", () => {
  it("are kept as own cookies, __proto__ included", async () => {
    const { setCookieJar } = await import("#sdk/util/cookies.js");
    const jar = setCookieJar(["__proto__=a; Path=/", "constructor=b", "plain=c"]);
    expect(Object.keys(jar).sort()).toEqual(["__proto__", "constructor", "plain"]);
    expect(Object.getPrototypeOf(jar)).toBe(Object.prototype);
    expect(jar.constructor).toBe("b");
  });
});
