import { describe, expect, it } from "vitest";
import {
  CommitRequestSchema,
  ForgetRequestSchema,
  PrepareReportSchema,
  PrepareRequestSchema,
  RestoreRequestSchema,
  RetireRequestSchema,
  prepareReport,
} from "#sdk/wire/control.js";

const base = { checkpoint_id: "c1", deadline_ts: 1_000 };

describe("control request schemas", () => {
  it("refuse unknown properties", () => {
    expect(PrepareRequestSchema.safeParse({ ...base, extra: 1 }).success).toBe(false);
  });

  it.each([
    ["empty", ""],
    ["too long", "a".repeat(129)],
    ["bad pattern", ".c"],
    ["a number", 5],
  ])("refuse a checkpoint_id that is %s", (_what, id) => {
    expect(PrepareRequestSchema.safeParse({ ...base, checkpoint_id: id }).success).toBe(false);
  });

  it("accept a 128-character checkpoint_id", () => {
    expect(
      PrepareRequestSchema.safeParse({ ...base, checkpoint_id: "a".repeat(128) }).success,
    ).toBe(true);
  });

  it.each([Number.NaN, Number.POSITIVE_INFINITY, Number.NEGATIVE_INFINITY, "1000", null])(
    "refuse deadline_ts %j",
    (deadline) => {
      expect(PrepareRequestSchema.safeParse({ ...base, deadline_ts: deadline }).success).toBe(
        false,
      );
    },
  );

  it("default commit scope to null and stop to false", () => {
    const commit = CommitRequestSchema.parse({ ...base, checkpoint_dir: "/d" });
    expect(commit.episode_ids).toBeNull();
    expect(commit.stop).toBe(false);
  });

  it("require restore episode_ids but allow an empty list", () => {
    expect(RestoreRequestSchema.safeParse({ ...base, checkpoint_dir: "/d" }).success).toBe(false);
    expect(
      RestoreRequestSchema.safeParse({ ...base, checkpoint_dir: "/d", episode_ids: [] }).success,
    ).toBe(true);
  });

  it("require a non-empty checkpoint_dir", () => {
    expect(
      CommitRequestSchema.safeParse({ ...base, checkpoint_dir: "", episode_ids: null }).success,
    ).toBe(false);
  });

  it.each(["ckpt", "./ckpt", "../ckpt", "ckpt/step-1"])(
    "refuse a relative checkpoint_dir (%s) on commit and restore, naming the field",
    (dir) => {
      for (const result of [
        CommitRequestSchema.safeParse({ ...base, checkpoint_dir: dir }),
        RestoreRequestSchema.safeParse({ ...base, checkpoint_dir: dir, episode_ids: [] }),
      ]) {
        expect(result.success).toBe(false);
        expect(result.error?.issues.map((issue) => issue.path)).toEqual([["checkpoint_dir"]]);
        expect(result.error?.issues[0]?.message).toMatch(/must be an absolute path/);
      }
    },
  );

  it("require at least one episode to retire and one rollout to forget", () => {
    expect(RetireRequestSchema.safeParse({ ...base, episode_ids: [] }).success).toBe(false);
    expect(ForgetRequestSchema.safeParse({ ...base, rollout_ids: [] }).success).toBe(false);
    expect(ForgetRequestSchema.safeParse({ ...base, rollout_ids: ["any thing"] }).success).toBe(
      true,
    );
  });
});

describe("prepare report", () => {
  it("cuts blockers to 100 and counts them all when built without a count", () => {
    const blockers = Array.from({ length: 250 }, (_, i) => `r${i}`);
    const report = prepareReport({ ready: false, blockers });
    expect(report.blockers).toHaveLength(100);
    expect(report.blockers[0]).toBe("r0");
    expect(report.blocker_count).toBe(250);
  });

  it("never caps restarts", () => {
    const restarts = Array.from({ length: 250 }, (_, i) => `r${i}`);
    expect(prepareReport({ ready: true, restarts }).restarts).toHaveLength(250);
  });

  it("round-trips unchanged when the count is given", () => {
    const blockers = Array.from({ length: 150 }, (_, i) => `r${i}`);
    const report = prepareReport({ ready: false, blockers, blockerCount: 150 });
    expect(report.blockers).toHaveLength(150);
    expect(PrepareReportSchema.parse(report)).toEqual(report);
  });

  it("fills defaults on the wire form", () => {
    expect(PrepareReportSchema.parse({ ready: true })).toEqual({
      ready: true,
      blockers: [],
      blocker_count: 0,
      counts: {},
      restarts: [],
    });
  });
});
