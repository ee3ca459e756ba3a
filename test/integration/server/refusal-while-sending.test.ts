/**
 * A body refused before it has all arrived (a charset or encoding the server does not speak,
 * data that is not valid gzip) is still answered to a client that keeps sending: the server
 * discards the rest instead of closing the connection under it, which a client saw as a write
 * error (EPIPE) with no reply. Only a body over the size limit closes the connection.
 */
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";

const started: CounterServer[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
});

async function serve(): Promise<string> {
  const server = new CounterServer({ name: "counter", logLevel: "silent" });
  started.push(server);
  return (await server.listen({ port: 0 })).url;
}

/** 8 MiB of JSON text: far more than a socket buffer, far less than the limit. */
const LARGE = Buffer.from(JSON.stringify({ verify_responses: [], blob: "y".repeat(8 << 20) }));

describe("a refusal while the client is still sending", () => {
  it.each([
    ["an unsupported charset", { "content-type": "application/json; charset=latin1" }, 415],
    [
      "an unknown encoding",
      { "content-type": "application/json", "content-encoding": "zstd" },
      415,
    ],
    [
      "data that is not gzip",
      { "content-type": "application/json", "content-encoding": "gzip" },
      400,
    ],
  ] as const)("reaches the client: %s", async (_, headers, status) => {
    const url = await serve();
    const res = await fetch(`${url}/aggregate_metrics`, {
      method: "POST",
      headers,
      body: LARGE,
    });
    expect(res.status).toBe(status);
    expect(((await res.json()) as { error: { code: string } }).error.code).toBe("invalid_request");
    // The connection stays usable: the next request on the server is answered.
    const next = await fetch(`${url}/aggregate_metrics`, {
      method: "POST",
      headers: { "content-type": "application/json" },
      body: JSON.stringify({ verify_responses: [{ reward: 1 }] }),
    });
    expect(next.status).toBe(200);
  });
});
