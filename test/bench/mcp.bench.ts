/**
 * `npm run bench:mcp`: one tool of the reference counter called over MCP (`tools/call` on
 * `/mcp`, stateless, one POST per call, session token) against the same tool over its POST route
 * (session cookie), in one run on one server, checkpointing on. Each round makes CALLS calls per
 * transport, CONCURRENCY at a time, alternating which goes first; prints calls per second per
 * round, the medians and the ratio MCP / POST. Figures, not a test.
 */
import { Agent, request } from "undici";
import CounterServer from "../../reference-servers/counter/src/index.js";
import { MCP_SESSION_TOKEN_HEADER } from "#sdk/server/resources/mcp-session-token.js";
import { median } from "./median.js";

const CALLS = Number(process.env.BENCH_CALLS ?? 2000);
const ROUNDS = Number(process.env.BENCH_ROUNDS ?? 5);
const CONCURRENCY = Number(process.env.BENCH_CONCURRENCY ?? 16);

const server = new CounterServer({
  name: "counter",
  config: { expose_tools_over_mcp: true },
  checkpoint: { enabled: true, control_auth_token: "bench-token" },
  logLevel: "silent",
});
const { url } = await server.listen({ port: 0 });
const dispatcher = new Agent({ connections: CONCURRENCY });

async function post(path: string, body: unknown, headers: Record<string, string>) {
  const res = await request(`${url}${path}`, {
    method: "POST",
    headers: { "content-type": "application/json", ...headers },
    body: JSON.stringify(body),
    dispatcher,
  });
  const text = await res.body.text();
  if (res.statusCode !== 200) throw new Error(`${path}: HTTP ${res.statusCode} ${text}`);
  return { text, headers: res.headers };
}

const seeded = await post(
  "/ng-rollout/r/seed_session",
  { resources_session_id: "s", task_data: {} },
  {},
);
const cookie = String(seeded.headers["set-cookie"] ?? "").split(";")[0] ?? "";
const token = (JSON.parse(seeded.text) as { resources_tools: { headers: Record<string, string> } })
  .resources_tools.headers[MCP_SESSION_TOKEN_HEADER] as string;

const viaPost = (): Promise<unknown> =>
  post("/ng-rollout/r/increment_counter", { count: 1 }, { cookie });
const viaMcp = (): Promise<unknown> =>
  post(
    "/mcp",
    {
      jsonrpc: "2.0",
      id: 1,
      method: "tools/call",
      params: { name: "increment_counter", arguments: { count: 1 } },
    },
    {
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-06-18",
      [MCP_SESSION_TOKEN_HEADER]: token,
    },
  );

/** Calls per second of CALLS calls, CONCURRENCY at a time. */
async function rate(call: () => Promise<unknown>): Promise<number> {
  let next = 0;
  const started = performance.now();
  await Promise.all(
    Array.from({ length: CONCURRENCY }, async () => {
      while (next++ < CALLS) await call();
    }),
  );
  return CALLS / ((performance.now() - started) / 1000);
}

await rate(viaPost); // warm-up, both paths
await rate(viaMcp);
const posts: number[] = [];
const mcps: number[] = [];
for (let round = 0; round < ROUNDS; round++) {
  if (round % 2 === 0) {
    posts.push(await rate(viaPost));
    mcps.push(await rate(viaMcp));
  } else {
    mcps.push(await rate(viaMcp));
    posts.push(await rate(viaPost));
  }
  console.log(
    `round ${round + 1}: POST ${posts.at(-1)?.toFixed(0)} calls/s, MCP ${mcps.at(-1)?.toFixed(0)} calls/s`,
  );
}
const postMedian = median(posts);
const mcpMedian = median(mcps);
console.log(
  `median: POST ${postMedian.toFixed(0)} calls/s, MCP ${mcpMedian.toFixed(0)} calls/s, MCP/POST ${(mcpMedian / postMedian).toFixed(2)}x (${CALLS} calls per round, ${CONCURRENCY} at a time)`,
);
await dispatcher.close();
await server.close();
