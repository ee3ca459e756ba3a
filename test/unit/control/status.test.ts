/**
 * Status and the dispatcher: every route's body is validated once, and invalid bodies become
 * 422 `invalid_request` naming each problem by path (see docs/errors.md).
 */
import fc from "fast-check";
import { afterEach, beforeEach, describe, expect, it } from "vitest";
import { InvalidRequestError } from "#sdk/errors.js";
import type { Operation } from "#sdk/wire/control.js";
import {
  eps,
  expectCode,
  harness,
  inSeconds,
  prepareReady,
  req,
  type Harness,
} from "../../support/test-participant.js";

let h: Harness;

beforeEach(() => {
  h = harness({ leaseGraceSeconds: 100 });
});

afterEach(() => {
  h.cp.close();
});

describe("status", () => {
  it("reports the idle state with participant extras merged at top level", () => {
    h.participant.statusExtras = { workers: 2, verify_mode: "replay" };
    expect(h.cp.status()).toEqual({
      workers: 2,
      verify_mode: "replay",
      kind: "resources",
      instance: "inst",
      phase: "idle",
      checkpoint_id: null,
      lease_expires_at: null,
      retired_rollouts: 0,
      report: {
        ready: true,
        blockers: [],
        blocker_count: 0,
        counts: { episodes: 0, pending: 0 },
        restarts: [],
      },
    });
  });

  it("reports the participant's kind", () => {
    const agent = harness({ kind: "agent" });
    expect(agent.cp.status().kind).toBe("agent");
    agent.cp.close();
  });

  it("reports the active checkpoint, its lease and the current report, without renewing the lease", async () => {
    h.participant.start("b");
    h.participant.start("a");
    h.participant.start("x", { restart: true });
    const prepare = req("k", -1);
    await h.cp.prepare(prepare);
    const status = await h.cp.dispatch("status", undefined);
    expect(status).toMatchObject({
      phase: "preparing",
      checkpoint_id: "k",
      lease_expires_at: prepare.deadline_ts + 100,
      report: { ready: false, blockers: ["a", "b"], blocker_count: 2, restarts: ["x"] },
    });
    expect(h.cp.leaseExpiresAt).toBe(prepare.deadline_ts + 100);
  });

  it("counts the rollouts with a retired mark", async () => {
    await h.cp.retire({
      checkpoint_id: "x",
      deadline_ts: inSeconds(30),
      episode_ids: eps("a", "b-a1", "b"),
    });
    expect(h.cp.status().retired_rollouts).toBe(2);
  });
});

describe("dispatch", () => {
  const deadline = 1_767_000_000;

  it("routes valid bodies to their operation, applying defaults", async () => {
    h.participant.start("a");
    h.participant.park("a", 1);
    const prepared = await h.cp.dispatch("prepare", {
      checkpoint_id: "k",
      deadline_ts: inSeconds(30),
      restarts: ["t-1"],
    });
    expect(prepared).toMatchObject({ phase: "prepared" });
    expect(await h.cp.dispatch("renew", { checkpoint_id: "k", deadline_ts: deadline })).toEqual({
      lease_expires_at: h.cp.leaseExpiresAt,
    });
    expect(await h.cp.dispatch("resume", { checkpoint_id: "k", deadline_ts: deadline })).toEqual({
      phase: "idle",
      idempotent: false,
    });
    expect(
      await h.cp.dispatch("retire", {
        checkpoint_id: "k",
        deadline_ts: inSeconds(30),
        episode_ids: [{ rollout_id: "a" }],
      }),
    ).toEqual({ retired_count: 1 });
    expect(h.participant.detailsOf("retire")).toEqual(["a"]);
    expect(
      await h.cp.dispatch("forget", {
        checkpoint_id: "k",
        deadline_ts: inSeconds(30),
        rollout_ids: ["a"],
      }),
    ).toEqual({ forgotten_count: 1 });
  });

  const invalid: [Operation, unknown, (string | number)[]][] = [
    ["prepare", undefined, []],
    ["prepare", { checkpoint_id: "k" }, ["deadline_ts"]],
    ["prepare", { checkpoint_id: "k", deadline_ts: deadline, extra: 1 }, []],
    ["prepare", { checkpoint_id: "k", deadline_ts: deadline, restarts: ["../x"] }, ["restarts", 0]],
    ["renew", { checkpoint_id: "", deadline_ts: deadline }, ["checkpoint_id"]],
    ["renew", { checkpoint_id: "x".repeat(129), deadline_ts: deadline }, ["checkpoint_id"]],
    ["renew", { checkpoint_id: ".k", deadline_ts: deadline }, ["checkpoint_id"]],
    ["resume", { checkpoint_id: "k", deadline_ts: Number.NaN }, ["deadline_ts"]],
    ["resume", { checkpoint_id: "k", deadline_ts: Number.POSITIVE_INFINITY }, ["deadline_ts"]],
    ["resume", { checkpoint_id: "k", deadline_ts: "soon" }, ["deadline_ts"]],
    ["commit", { checkpoint_id: "k", deadline_ts: deadline }, ["checkpoint_dir"]],
    [
      "commit",
      { checkpoint_id: "k", deadline_ts: deadline, checkpoint_dir: "" },
      ["checkpoint_dir"],
    ],
    [
      "commit",
      {
        checkpoint_id: "k",
        deadline_ts: deadline,
        checkpoint_dir: "/d",
        episode_ids: [{ rollout_id: "r-a1" }],
      },
      ["episode_ids", 0, "rollout_id"],
    ],
    [
      "commit",
      { checkpoint_id: "k", deadline_ts: deadline, checkpoint_dir: "/d", stop: "yes" },
      ["stop"],
    ],
    [
      "restore",
      { checkpoint_id: "k", deadline_ts: deadline, checkpoint_dir: "/d" },
      ["episode_ids"],
    ],
    [
      "restore",
      {
        checkpoint_id: "k",
        deadline_ts: deadline,
        checkpoint_dir: "/d",
        episode_ids: [{ rollout_id: "r", attempt: -1 }],
      },
      ["episode_ids", 0, "attempt"],
    ],
    ["retire", { checkpoint_id: "k", deadline_ts: deadline, episode_ids: [] }, ["episode_ids"]],
    ["forget", { checkpoint_id: "k", deadline_ts: deadline, rollout_ids: [] }, ["rollout_ids"]],
  ];

  it.each(invalid)(
    "refuses an invalid %s body with 422 invalid_request naming the path",
    async (operation, body, where) => {
      const error = await expectCode(h.cp.dispatch(operation, body), "invalid_request");
      expect(error).toBeInstanceOf(InvalidRequestError);
      expect(error.status).toBe(422);
      const issues = (error as InvalidRequestError).issues;
      expect(issues.length).toBeGreaterThan(0);
      expect(issues.map((issue) => issue.path)).toContainEqual(where);
      expect((error as InvalidRequestError).toEnvelope().error.issues).toEqual(issues);
      // Nothing reached the participant or changed the state.
      expect(h.participant.calls).toEqual([]);
      expect(h.cp.phase).toBe("idle");
    },
  );

  it("refuses every body that is not an object on every POST route", async () => {
    const operations: Operation[] = [
      "prepare",
      "renew",
      "retire",
      "forget",
      "commit",
      "restore",
      "resume",
    ];
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...operations),
        fc.oneof(
          fc.constant(null),
          fc.boolean(),
          fc.double(),
          fc.string(),
          fc.array(fc.anything()),
        ),
        async (operation, body) => {
          await expectCode(h.cp.dispatch(operation, body), "invalid_request");
        },
      ),
      { numRuns: 200 },
    );
    expect(h.participant.calls).toEqual([]);
  });

  it("refuses an unknown property on every POST route, whatever its name", async () => {
    const valid: Record<string, Record<string, unknown>> = {
      prepare: { checkpoint_id: "k", deadline_ts: deadline },
      renew: { checkpoint_id: "k", deadline_ts: deadline },
      resume: { checkpoint_id: "k", deadline_ts: deadline },
      retire: { checkpoint_id: "k", deadline_ts: deadline, episode_ids: [{ rollout_id: "r" }] },
      forget: { checkpoint_id: "k", deadline_ts: deadline, rollout_ids: ["r"] },
      commit: { checkpoint_id: "k", deadline_ts: deadline, checkpoint_dir: "/d" },
      restore: { checkpoint_id: "k", deadline_ts: deadline, checkpoint_dir: "/d", episode_ids: [] },
    };
    await fc.assert(
      fc.asyncProperty(
        fc.constantFrom(...Object.keys(valid)),
        fc.string({ minLength: 1 }),
        fc.jsonValue(),
        async (operation, key, value) => {
          const body = valid[operation] as Record<string, unknown>;
          fc.pre(
            !(key in body) &&
              key !== "__proto__" &&
              !["restarts", "episode_ids", "stop"].includes(key),
          );
          const error = await expectCode(
            h.cp.dispatch(operation as Operation, { ...body, [key]: value }),
            "invalid_request",
          );
          expect(error.status).toBe(422);
        },
      ),
      { numRuns: 200 },
    );
    expect(h.participant.calls).toEqual([]);
  });

  it("answers status whatever the body", async () => {
    await prepareReady(h.cp, "k");
    expect(await h.cp.dispatch("status", { anything: true })).toMatchObject({ phase: "prepared" });
  });
});
