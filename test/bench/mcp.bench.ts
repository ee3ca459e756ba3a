/**
 * `npm run bench:mcp`: one tool of the reference counter called over MCP (`tools/call` on
 * `/mcp`, stateless, one POST per call, session token) against the same tool over its POST route
 * (session cookie), in one run on one server, checkpointing on. A third leg sends the same call
 * with an empty `_meta` in its params, which the endpoint leaves to the MCP SDK's server and
 * transport (the plain-call path answers only calls without one): what every call cost before
 * that path. Each round makes CALLS calls per leg, CONCURRENCY at a time, rotating which goes
 * first; prints calls per second per round, the medians and the ratios to POST against the
 * target (MCP at least 0.8x POST). Figures, not a test.
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
const mcpCall = (params: Record<string, unknown>) => (): Promise<unknown> =>
  post(
    "/mcp",
    { jsonrpc: "2.0", id: 1, method: "tools/call", params },
    {
      accept: "application/json, text/event-stream",
      "mcp-protocol-version": "2025-06-18",
      [MCP_SESSION_TOKEN_HEADER]: token,
    },
  );
const viaMcp = mcpCall({ name: "increment_counter", arguments: { count: 1 } });
const viaSdk = mcpCall({ name: "increment_counter", arguments: { count: 1 }, _meta: {} });

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

const legs = [
  { name: "POST", call: viaPost, rates: [] as number[] },
  { name: "MCP", call: viaMcp, rates: [] as number[] },
  { name: "MCP via SDK", call: viaSdk, rates: [] as number[] },
];
for (const leg of legs) await rate(leg.call); // warm-up
for (let round = 0; round < ROUNDS; round++) {
  const order = legs.map((_, i) => legs[(i + round) % legs.length]!);
  for (const leg of order) leg.rates.push(await rate(leg.call));
  console.log(
    `round ${round + 1}: ${legs.map((leg) => `${leg.name} ${leg.rates.at(-1)?.toFixed(0)}`).join(", ")} calls/s`,
  );
}
const [postMedian, mcpMedian, sdkMedian] = legs.map((leg) => median(leg.rates)) as [
  number,
  number,
  number,
];
console.log(
  `median: POST ${postMedian.toFixed(0)}, MCP ${mcpMedian.toFixed(0)}, MCP via SDK ${sdkMedian.toFixed(0)} calls/s ` +
    `(${CALLS} calls per round, ${CONCURRENCY} at a time)`,
);
console.log(
  `MCP/POST ${(mcpMedian / postMedian).toFixed(2)}x (target: at least 0.80x), ` +
    `MCP via SDK/POST ${(sdkMedian / postMedian).toFixed(2)}x`,
);
await dispatcher.close();
await server.close();
