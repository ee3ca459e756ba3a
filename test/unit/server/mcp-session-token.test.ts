import { createHmac } from "node:crypto";
import { describe, expect, it } from "vitest";
import { episodeId } from "#sdk/identity/episode-id.js";
import { McpSessionTokens } from "#sdk/server/resources/mcp-session-token.js";

const key = Buffer.alloc(32, 7);
const tokens = new McpSessionTokens(key);

/** A token signed with `key` over raw payload bytes (as a forger holding the key could). */
function signedBytes(payload: Buffer): string {
  const body = payload.toString("base64url");
  return `${body}.${createHmac("sha256", key).update(body).digest("base64url")}`;
}

describe("MCP session tokens", () => {
  it("round-trip the session, the attempt and the allowed tools", () => {
    const claims = { sessionId: "s1", episode: episodeId("r", 2), tools: ["add"] };
    expect(tokens.decode(tokens.mint(claims))).toEqual(claims);
    const open = { sessionId: "s2", episode: null, tools: null };
    expect(tokens.decode(tokens.mint(open))).toEqual(open);
  });

  it("name the owner worker only when given one, as session cookies do", () => {
    const owned = { sessionId: "s1", episode: null, tools: null, owner: "w-1" };
    expect(tokens.decode(tokens.mint(owned))).toEqual(owned);
    const single = tokens.mint({ sessionId: "s1", episode: null, tools: null, owner: null });
    expect(single).toBe(tokens.mint({ sessionId: "s1", episode: null, tools: null }));
    expect(tokens.decode(single)).not.toHaveProperty("owner");
    const empty = signedBytes(Buffer.from(JSON.stringify({ sid: "s1", owner: "" })));
    expect(tokens.decode(empty)).toBeNull();
  });

  it("read as none: missing, another key's, a changed payload, not UTF-8, not an object, no session", () => {
    const minted = tokens.mint({ sessionId: "s1", episode: null, tools: null });
    const [payload, signature] = minted.split(".") as [string, string];
    const unusable = [
      undefined,
      "",
      "garbage",
      new McpSessionTokens(Buffer.alloc(32, 8)).mint({
        sessionId: "s1",
        episode: null,
        tools: null,
      }),
      `${payload}x.${signature}`,
      `${payload}.${signature}é`,
      signedBytes(Buffer.concat([Buffer.from('{"sid":"'), Buffer.from([0xff]), Buffer.from('"}')])),
      signedBytes(Buffer.from(JSON.stringify(["s1"]))),
      signedBytes(Buffer.from(JSON.stringify("s1"))),
      signedBytes(Buffer.from(JSON.stringify({ tools: null }))),
      signedBytes(Buffer.from(JSON.stringify({ sid: "s1", tools: [1] }))),
      signedBytes(Buffer.from(JSON.stringify({ sid: "s1", episode: "bad key!" }))),
    ];
    for (const value of unusable) expect(tokens.decode(value), String(value)).toBeNull();
  });
});
