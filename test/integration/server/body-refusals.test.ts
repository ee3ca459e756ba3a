/**
 * Hostile and careless bodies on every route of every server kind, control routes included:
 * bad content encodings, inflation past the limit, a declared length past the limit, nesting
 * past the depth limit, charsets and content types. Each is a typed 4xx `invalid_request`
 * naming what is wrong, never a 500 and never a hang.
 */
import { brotliCompressSync, deflateSync, gzipSync } from "node:zlib";
import { afterAll, beforeAll, describe, expect, it } from "vitest";
import { BODY_LIMIT_BYTES } from "#sdk/server/json-body.js";
import { MAX_BODY_DEPTH } from "#sdk/server/json-depth.js";
import type { Server } from "#sdk/server/server.js";
import {
  AUTH,
  CHECKPOINT,
  EchoResources,
  PlainServer,
  codeOf,
  documentedOperations,
  everyKind,
  send,
  type RawReply,
} from "./kinds.js";

/** JSON nested `depth` levels deep: `{"a":[[…]]}` has depth 2 + the inner arrays. */
function nested(depth: number): string {
  return `${"[".repeat(depth)}${"]".repeat(depth)}`;
}

/**
 * A gzip body that inflates to about 1 GiB of JSON whitespace: one small member repeated (gzip
 * members concatenate), so the test builds it in milliseconds.
 */
function gzipBomb(): Buffer {
  const member = gzipSync(Buffer.alloc(1024 * 1024, 0x20));
  return Buffer.concat(Array.from({ length: 1024 }, () => member));
}

interface Case {
  readonly name: string;
  /** Costly: sent to one data route and one control route of each server only. */
  readonly costly?: boolean;
  readonly headers: Record<string, string>;
  readonly body: Buffer | string;
  readonly unfinished?: boolean;
  readonly status: number;
  /** A word the detail must contain. */
  readonly names: string;
}

const JSON_TYPE = { "content-type": "application/json" };
const bomb = gzipBomb();
const cases: Case[] = [
  {
    name: "gzip that is not gzip",
    headers: { ...JSON_TYPE, "content-encoding": "gzip" },
    body: '{"not": "gzip"}',
    status: 400,
    names: "gzip",
  },
  {
    name: "deflate that is not deflate",
    headers: { ...JSON_TYPE, "content-encoding": "deflate" },
    body: '{"not": "deflate"}',
    status: 400,
    names: "deflate",
  },
  {
    name: "br that is not brotli",
    headers: { ...JSON_TYPE, "content-encoding": "br" },
    body: Buffer.from([0xff, 0xff, 0xff, 0xff, 0x00, 0x01]),
    status: 400,
    names: "br",
  },
  {
    name: "gzip cut short",
    headers: { ...JSON_TYPE, "content-encoding": "gzip" },
    body: gzipSync(Buffer.from('{"a": 1}')).subarray(0, 12),
    status: 400,
    names: "gzip",
  },
  {
    name: "an unknown encoding",
    headers: { ...JSON_TYPE, "content-encoding": "compress" },
    body: "{}",
    status: 415,
    names: "compress",
  },
  {
    name: "stacked encodings",
    headers: { ...JSON_TYPE, "content-encoding": "gzip, br" },
    body: "{}",
    status: 415,
    names: "gzip, br",
  },
  {
    name: "a charset other than UTF-8",
    headers: { "content-type": "application/json; charset=latin1" },
    body: "{}",
    status: 415,
    names: "latin1",
  },
  {
    name: "a declared length past the limit, with two bytes sent",
    headers: { ...JSON_TYPE, "content-length": String(70 * 1024 * 1024) },
    body: "{}",
    unfinished: true,
    status: 413,
    names: "Content-Length",
  },
  {
    name: "a declared length of 1e12",
    headers: { ...JSON_TYPE, "content-length": "1000000000000" },
    body: "{}",
    unfinished: true,
    status: 413,
    names: "Content-Length",
  },
  {
    name: "JSON nested 5,000 levels",
    headers: JSON_TYPE,
    body: nested(5000),
    status: 422,
    names: `${MAX_BODY_DEPTH} levels`,
  },
  {
    name: "gzip of JSON nested 5,000 levels",
    headers: { ...JSON_TYPE, "content-encoding": "gzip" },
    body: gzipSync(nested(5000)),
    status: 422,
    names: `${MAX_BODY_DEPTH} levels`,
  },
  {
    name: "JSON that does not parse",
    headers: JSON_TYPE,
    body: '{"a": ',
    status: 422,
    names: "not valid JSON",
  },
  {
    name: "gzip inflating past the limit",
    costly: true,
    headers: { ...JSON_TYPE, "content-encoding": "gzip" },
    body: bomb,
    status: 413,
    names: "inflates",
  },
];

function expectRefusal(reply: RawReply, expected: Case, where: string): void {
  const what = `${expected.name} on ${where}: ${JSON.stringify(reply.body).slice(0, 300)}`;
  expect(reply.status, what).toBe(expected.status);
  expect(codeOf(reply), what).toBe("invalid_request");
  const detail = (reply.body as { error: { detail: string } }).error.detail;
  expect(detail, what).toContain(expected.names);
}

describe.each(everyKind())("every route of a $kind server", ({ server }) => {
  let url = "";
  beforeAll(async () => {
    url = (await server.listen({ port: 0 })).url;
  });
  afterAll(async () => {
    await server.close();
  });

  const operations = documentedOperations(server).filter(([method]) => method === "POST");
  const control = operations.filter(([, path]) => path.startsWith("/ng-control/"));
  const data = operations.filter(([, path]) => !path.startsWith("/ng-control/"));
  const sample = [...data.slice(0, 1), ...control.slice(0, 1)];

  it.each(cases)("refuses $name with a typed $status", async (refused) => {
    expect(data.length).toBeGreaterThan(0);
    for (const [method, path] of refused.costly === true ? sample : operations) {
      const reply = await send(url, {
        method,
        path,
        headers: { authorization: AUTH, ...refused.headers },
        body: refused.body,
        unfinished: refused.unfinished ?? false,
      });
      expectRefusal(reply, refused, `${method} ${path}`);
    }
  });
});

describe("bodies within the limits", () => {
  let plain: Server;
  let resources: Server;
  let plainUrl = "";
  let resourcesUrl = "";
  beforeAll(async () => {
    plain = new PlainServer({ name: "plain", checkpoint: CHECKPOINT });
    resources = new EchoResources({ name: "resources", checkpoint: CHECKPOINT });
    plainUrl = (await plain.listen({ port: 0 })).url;
    resourcesUrl = (await resources.listen({ port: 0 })).url;
  });
  afterAll(async () => {
    await Promise.all([plain.close(), resources.close()]);
  });

  it(`echo JSON nested exactly ${MAX_BODY_DEPTH} levels, and refuse one more`, async () => {
    const deepest = JSON.parse(nested(MAX_BODY_DEPTH - 1)) as unknown;
    const echoed = await send(plainUrl, {
      path: "/ng-rollout/r/echo",
      headers: JSON_TYPE,
      body: JSON.stringify({ deep: deepest }),
    });
    expect(echoed.status).toBe(200);
    expect(echoed.body).toEqual({ echo: { deep: deepest } });
    const verified = await send(resourcesUrl, {
      path: "/ng-rollout/r/verify",
      headers: JSON_TYPE,
      body: JSON.stringify({ deep: deepest }),
    });
    expect(verified.status).toBe(200);
    expect((verified.body as { deep: unknown }).deep).toEqual(deepest);
    const tooDeep = await send(resourcesUrl, {
      path: "/ng-rollout/r/verify",
      headers: JSON_TYPE,
      body: JSON.stringify({ deep: [deepest] }),
    });
    expect(tooDeep.status).toBe(422);
    expect(codeOf(tooDeep)).toBe("invalid_request");
  });

  it("count brackets inside strings as text, escaped quotes included", async () => {
    const text = `${"[{".repeat(4000)}\\"]]`;
    const reply = await send(plainUrl, {
      path: "/echo",
      headers: JSON_TYPE,
      body: JSON.stringify({ text }),
    });
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({ echo: { text } });
  });

  it("decode gzip, deflate and br bodies", async () => {
    const body = JSON.stringify({ hello: "world", n: [1, 2, 3] });
    const encoded: [string, Buffer][] = [
      ["gzip", gzipSync(body)],
      ["deflate", deflateSync(body)],
      ["br", brotliCompressSync(body)],
      ["identity", Buffer.from(body)],
      ["GZip", gzipSync(body)],
    ];
    for (const [encoding, bytes] of encoded) {
      const reply = await send(plainUrl, {
        path: "/echo",
        headers: { ...JSON_TYPE, "content-encoding": encoding },
        body: bytes,
      });
      expect(reply.status, encoding).toBe(200);
      expect(reply.body, encoding).toEqual({ echo: JSON.parse(body) });
    }
  });

  it("take a body of exactly the limit", async () => {
    const body = Buffer.alloc(BODY_LIMIT_BYTES, 0x20);
    body.write("{}", 0);
    const reply = await send(plainUrl, { path: "/echo", headers: JSON_TYPE, body });
    expect(reply.status).toBe(200);
    expect(reply.body).toEqual({ echo: {} });
  });

  it("answer a chunked body past the limit with 413", async () => {
    const reply = await send(plainUrl, {
      path: "/echo",
      headers: { ...JSON_TYPE, "transfer-encoding": "chunked" },
      body: Buffer.alloc(BODY_LIMIT_BYTES + 1, 0x20),
    });
    expect(reply.status).toBe(413);
    expect(codeOf(reply)).toBe("invalid_request");
  });

  it("keep the old reading of empty and non-JSON bodies", async () => {
    // An empty JSON body is {}; a body of another type reaches the route as no body.
    const empty = await send(plainUrl, { path: "/echo", headers: JSON_TYPE, body: "" });
    expect(empty.body).toEqual({ echo: {} });
    const text = await send(plainUrl, {
      path: "/echo",
      headers: { "content-type": "text/plain", "content-encoding": "gzip" },
      body: "not gzip, not JSON",
    });
    expect(text.status).toBe(200);
    expect(text.body).toEqual({});
    const bom = await send(plainUrl, { path: "/echo", headers: JSON_TYPE, body: '\ufeff{"a":1}' });
    expect(bom.body).toEqual({ echo: { a: 1 } });
    const utf8 = await send(plainUrl, {
      path: "/echo",
      headers: { "content-type": "application/json; charset=UTF-8" },
      body: '{"a":"é"}',
    });
    expect(utf8.body).toEqual({ echo: { a: "é" } });
  });
});
