/**
 * `agentSeedRequestFromWire` is `AgentSeedRequestSchema`'s parse checked by hand: for any value
 * it answers what the schema answers (same data, same key order), or null wherever the schema
 * refuses or decides (an MCP grant), so the schema then names the problem.
 */
import fc from "fast-check";
import { describe, expect, it } from "vitest";
import { AgentSeedRequestSchema, agentSeedRequestFromWire } from "#sdk/wire/agent.js";
import { expectAgreesWithSchema, mostly, throughJson } from "../../support/fast-path.js";

const maybe = (right: fc.Arbitrary<unknown>, weight = 8) => mostly(right, undefined, weight);
const strings = fc.dictionary(fc.constantFrom("a", "b", "__proto__"), maybe(fc.string(), 12));

const directHttp = fc.record(
  {
    kind: maybe(fc.constant("direct_http"), 20),
    name: maybe(fc.constantFrom("counter", "weather", "counter.direct_http"), 20),
    required: maybe(fc.boolean()),
    base_url: maybe(fc.constantFrom("http://127.0.0.1:1/ng-rollout/r", "u")),
    cookies: maybe(fc.option(strings)),
    headers: maybe(strings),
    extra: fc.constant(undefined),
  },
  { requiredKeys: [] },
);
const mcp = fc.record({
  kind: fc.constant("mcp"),
  name: fc.constant("m"),
  connection: fc.record({ transport: fc.constant("http"), url: fc.constant("u") }),
});

const seed = fc.record(
  {
    agent_session_id: maybe(fc.constantFrom("agent-session-1", "s")),
    episode_id: maybe(
      fc.record({ rollout_id: fc.constantFrom("r", "task-3", ".bad"), attempt: fc.nat(2) }),
    ),
    task_id: maybe(
      fc.record({
        taskset: maybe(fc.constant("counter"), 20),
        task_id: maybe(fc.constant("3"), 20),
      }),
    ),
    tool_accesses: maybe(
      fc.array(fc.oneof({ weight: 9, arbitrary: directHttp }, { weight: 1, arbitrary: mcp }), {
        maxLength: 3,
      }),
    ),
    sandbox_access: maybe(fc.option(fc.dictionary(fc.string(), fc.jsonValue({ maxDepth: 1 })))),
    surprise: fc.constant(undefined),
  },
  { requiredKeys: [] },
);

/** Stored requests as they read back from JSON, sometimes with a key the schema refuses. */
const stored = fc.tuple(seed, fc.boolean()).map(([raw, extraKey]) => {
  const value = throughJson(raw) as Record<string, unknown>;
  if (extraKey) value.unexpected = 1;
  return value;
});

describe("agentSeedRequestFromWire", () => {
  it("answers what AgentSeedRequestSchema answers, or null where the schema refuses", () => {
    expectAgreesWithSchema({
      values: stored,
      fast: agentSeedRequestFromWire,
      slow: (value) => AgentSeedRequestSchema.safeParse(value),
      minTaken: 10,
    });
  });

  it("takes a stored Simple Agent request as it is, defaults filled in", () => {
    const request = {
      agent_session_id: "agent-session-1",
      episode_id: { rollout_id: "r", attempt: 0 },
      task_id: { taskset: "counter", task_id: "3" },
      tool_accesses: [{ kind: "direct_http", name: "counter", base_url: "http://h/ng-rollout/r" }],
    };
    expect(agentSeedRequestFromWire(request)).toEqual({
      ...request,
      tool_accesses: [
        {
          kind: "direct_http",
          name: "counter",
          required: true,
          base_url: "http://h/ng-rollout/r",
          cookies: null,
          headers: {},
        },
      ],
      sandbox_access: null,
    });
  });
});
