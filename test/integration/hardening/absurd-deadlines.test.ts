/**
 * A deadline absurdly far ahead (1e308, 2^53 + 1, milliseconds sent as seconds) once pinned the
 * lease until then: refused on every control operation with 422 naming `deadline_ts`, leaving
 * the participant as it was. A deadline a month ahead is still accepted.
 */
import { afterEach, describe, expect, it } from "vitest";
import CounterServer from "../../../reference-servers/counter/src/index.js";
import { controlRoutes } from "../../support/control-routes.js";

const TOKEN = "absurd-deadlines-token";
const { control, status } = controlRoutes(TOKEN);
const started: CounterServer[] = [];
afterEach(async () => {
  for (const server of started.splice(0)) await server.close();
});

function app() {
  const server = new CounterServer({
    name: "counter",
    checkpoint: { enabled: true, control_auth_token: TOKEN },
    logLevel: "silent",
  });
  started.push(server);
  return server.app();
}

const ABSURD = [1e308, 2 ** 53 + 1, Date.now()];
const OPERATIONS: [string, Record<string, unknown>][] = [
  ["prepare", {}],
  ["renew", {}],
  ["commit", { checkpoint_dir: "/tmp/never-written", episode_ids: null }],
  ["resume", {}],
  [
    "restore",
    { checkpoint_dir: "/tmp/never-read", episode_ids: [{ rollout_id: "r", attempt: 0 }] },
  ],
  ["retire", { episode_ids: [{ rollout_id: "r", attempt: 0 }] }],
  ["forget", { rollout_ids: ["r"] }],
];

describe("deadline_ts far ahead", () => {
  it.each(OPERATIONS)("%s refuses it with 422 naming deadline_ts", async (operation, body) => {
    const target = app();
    for (const deadline of ABSURD) {
      const res = await control(target, operation, {
        checkpoint_id: "c1",
        ...body,
        deadline_ts: deadline,
      });
      expect(res.status, `${deadline}: ${JSON.stringify(res.body)}`).toBe(422);
      expect(res.body.error.code).toBe("invalid_request");
      expect(res.body.error.issues[0].path).toEqual(["deadline_ts"]);
    }
    const after = await status<{ phase: string; lease_expires_at?: unknown }>(target);
    expect(after.phase).toBe("idle");
  });

  it("accepts a deadline a month ahead, and its lease follows it", async () => {
    const target = app();
    const monthAhead = Date.now() / 1000 + 30 * 24 * 3600;
    const res = await control(target, "prepare", { checkpoint_id: "c1", deadline_ts: monthAhead });
    expect(res.status, JSON.stringify(res.body)).toBe(200);
    await control(target, "resume", { checkpoint_id: "c1" }).expect(200);
  });
});
