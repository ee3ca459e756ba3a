/**
 * The reference counter's tool and metrics routes: `/increment_counter` requires `count` (as in
 * the reference counter), and `/aggregate_metrics` sums up verify responses.
 */
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import { aggregateMetrics } from "#sdk/server/resources/aggregate-metrics.js";

const TOKEN = "counter-token";
const started: CounterServer[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
});

function counter(): CounterServer {
  const server = new CounterServer({
    name: "counter",
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    logLevel: "silent",
  });
  started.push(server);
  return server;
}

/** A client with a seeded session of episode `r` (its cookie kept). */
async function seeded(server: CounterServer, initial = 0) {
  const agent = request.agent(server.app());
  await agent.post("/ng-rollout/r/seed_session").send({ initial_count: initial }).expect(200);
  return agent;
}

describe("/increment_counter", () => {
  it.each([
    ["no count", {}],
    ["a text count", { count: "1" }],
    ["a fractional count", { count: 1.5 }],
    ["an unknown field", { count: 1, by: 2 }],
  ])("refuses %s with 422 naming the field, and leaves the counter as it was", async (_n, body) => {
    const server = counter();
    const agent = await seeded(server);
    const res = await agent.post("/ng-rollout/r/increment_counter").send(body);
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
    expect(res.body.error.issues.length).toBeGreaterThan(0);
    expect([...server.states.values()].map((c) => c.count)).toEqual([0]);
  });

  it("adds count, and refuses a sum past the largest safe integer with 422", async () => {
    const server = counter();
    const agent = await seeded(server, Number.MAX_SAFE_INTEGER - 1);
    await agent.post("/ng-rollout/r/increment_counter").send({ count: 1 }).expect(200);
    const res = await agent.post("/ng-rollout/r/increment_counter").send({ count: 1 });
    expect(res.status, JSON.stringify(res.body)).toBe(422);
    expect(res.body.error.issues[0].path).toEqual(["count"]);
    const read = await agent.post("/ng-rollout/r/get_counter_value").send({}).expect(200);
    expect(read.body).toEqual({ count: Number.MAX_SAFE_INTEGER });
  });
});

describe("/aggregate_metrics", () => {
  it("answers statistics per task and overall, without a session or a rollout prefix", async () => {
    const server = counter();
    const res = await request(server.app())
      .post("/aggregate_metrics")
      .send({
        verify_responses: [
          { _ng_task_index: 3, reward: 1 },
          { _ng_task_index: 3, reward: 0 },
          { reward: 1, note: "no task index" },
        ],
      });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.key_metrics).toEqual({ "mean/reward": 2 / 3 });
    expect(res.body.group_level_metrics).toEqual([
      {
        _ng_task_index: 3,
        "mean/reward": 0.5,
        "max/reward": 1,
        "min/reward": 0,
        "median/reward": 0.5,
        "std/reward": Math.sqrt(0.5),
      },
    ]);
  });

  it("aggregates nothing to empty metrics, and refuses a body without verify_responses", async () => {
    expect(aggregateMetrics({ verify_responses: [] })).toEqual({
      group_level_metrics: [],
      agent_metrics: {},
      key_metrics: {},
    });
    const server = counter();
    const res = await request(server.app()).post("/aggregate_metrics").send({});
    expect(res.status).toBe(422);
    expect(res.body.error.code).toBe("invalid_request");
  });
});
