/**
 * `POST /aggregate_metrics` belongs to every resources server: the base class serves reward
 * statistics by default (the weather server, stateless and without a route of its own, answers
 * it), a subclass overrides the aggregation, and the route is counted like any other request.
 */
import request from "supertest";
import { afterEach, describe, expect, it } from "vitest";
import { ResourcesServer } from "#sdk/index.js";
import { type AggregateMetricsRequest } from "#sdk/protocol.js";
import WeatherServer from "../../../reference-servers/weather/src/index.js";

const started: { close(): Promise<void> }[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
});

class CountingServer extends ResourcesServer {
  protected override verify() {
    return { reward: 1 };
  }

  protected override aggregateMetrics(request: AggregateMetricsRequest) {
    return { rollouts: request.verify_responses.length };
  }
}

describe("/aggregate_metrics on the base resources server", () => {
  it("is served by default: the weather server describes rewards per task and overall", async () => {
    const server = new WeatherServer({ name: "weather", logLevel: "silent" });
    started.push(server);
    const res = await request(server.app())
      .post("/aggregate_metrics")
      .send({
        verify_responses: [
          { _ng_task_index: 0, reward: 1, mask_sample: false },
          { _ng_task_index: 0, reward: 0, mask_sample: true },
        ],
      });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    expect(res.body.key_metrics).toEqual({ "mean/reward": 0.5 });
    expect(res.body.agent_metrics["mean/mask_sample"]).toBe(0.5);
    expect(res.body.group_level_metrics).toHaveLength(1);
  });

  it("takes a subclass's own aggregation, and refuses a body that is not verify responses", async () => {
    const server = new CountingServer({ name: "counting", logLevel: "silent" });
    started.push(server);
    const app = server.app();
    const res = await request(app)
      .post("/aggregate_metrics")
      .send({ verify_responses: [{ reward: 1 }, { reward: 0 }, { reward: 1 }] });
    expect(res.status).toBe(200);
    expect(res.body).toEqual({ rollouts: 3 });
    const refused = await request(app).post("/aggregate_metrics").send({ verify_responses: 3 });
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe("invalid_request");
  });

  it("keeps keys named like Object.prototype members, and refuses a __proto__ key by name", async () => {
    const server = new WeatherServer({ name: "weather", logLevel: "silent" });
    started.push(server);
    const app = server.app();
    const kept = await request(app)
      .post("/aggregate_metrics")
      .set("content-type", "application/json")
      .send('{"verify_responses":[{"reward":1,"constructor":2,"hasOwnProperty":3}]}');
    expect(kept.status, JSON.stringify(kept.body)).toBe(200);
    expect(kept.body.agent_metrics["mean/constructor"]).toBe(2);
    expect(kept.body.agent_metrics["mean/hasOwnProperty"]).toBe(3);
    // Validation would drop the key without a word: the body is refused instead, naming it.
    const refused = await request(app)
      .post("/aggregate_metrics")
      .set("content-type", "application/json")
      .send('{"verify_responses":[{"reward":1,"\\u005f_proto__":1}]}');
    expect(refused.status).toBe(422);
    expect(refused.body.error.code).toBe("invalid_request");
    expect(refused.body.error.issues[0].path).toEqual(["verify_responses", 0, "__proto__"]);
  });
});
